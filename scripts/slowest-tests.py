#!/usr/bin/env python3
"""Lists the slowest tests of the last `cargo nextest run` (its JUnit report,
target/nextest/default/junit.xml), slowest first, with the sum of all tests' times: what
.config/nextest.toml's priorities and threads are chosen from (docs/DEVELOPMENT.md, "How many
tests at once"). Usage: scripts/slowest-tests.py [COUNT] [REPORT]
"""
import os
import sys
import xml.etree.ElementTree as ET

count = int(sys.argv[1]) if len(sys.argv) > 1 else 20
here = os.path.dirname(os.path.abspath(__file__))
report = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    here, "..", "target", "nextest", "default", "junit.xml")
root = ET.parse(report).getroot()
times = sorted(((float(case.get("time", 0)), case.get("name"))
                for case in root.iter("testcase")), reverse=True)
print(f"{len(times)} tests, {sum(t for t, _ in times):.0f} s in all, "
      f"wall {float(root.get('time', 0)):.0f} s")
for seconds, name in times[:count]:
    print(f"{seconds:8.1f} s  {name}")
