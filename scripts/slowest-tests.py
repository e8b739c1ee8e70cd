#!/usr/bin/env python3
"""Lists the slowest tests of the last `cargo nextest run` (its JUnit report,
target/nextest/default/junit.xml), slowest first, with the sum of all tests' times: what
.config/nextest.toml's priorities and threads are chosen from (docs/DEVELOPMENT.md, "How many
tests at once"). With --failed, lists the tests that failed instead, each with the first lines
of its failure (docs/DEVELOPMENT.md, "A test that fails now and then").
Usage: scripts/slowest-tests.py [--failed] [COUNT] [REPORT]
"""
import os
import sys
import xml.etree.ElementTree as ET

args = sys.argv[1:]
failed = "--failed" in args
args = [arg for arg in args if arg != "--failed"]
count = int(args[0]) if args else 20
here = os.path.dirname(os.path.abspath(__file__))
report = args[1] if len(args) > 1 else os.path.join(
    here, "..", "target", "nextest", "default", "junit.xml")
root = ET.parse(report).getroot()
if failed:
    failures = [(case.get("name"), problem)
                for case in root.iter("testcase")
                for problem in list(case.findall("failure")) + list(case.findall("error"))]
    print(f"{len(failures)} failed")
    for name, problem in failures[:count]:
        text = (problem.get("message") or "") + "\n" + (problem.text or "")
        lines = []
        for line in text.splitlines():
            if line.strip().startswith("stack backtrace"):
                break
            if line.strip() and (not lines or line.rstrip(":") != lines[-1].rstrip(":")):
                lines.append(line)
        print(name)
        for line in lines[:6]:
            print(f"    {line.strip()[:200]}")
    sys.exit(0)
times = sorted(((float(case.get("time", 0)), case.get("name"))
                for case in root.iter("testcase")), reverse=True)
print(f"{len(times)} tests, {sum(t for t, _ in times):.0f} s in all, "
      f"wall {float(root.get('time', 0)):.0f} s")
for seconds, name in times[:count]:
    print(f"{seconds:8.1f} s  {name}")
