//! What `file-agent bench` prints: medians of every kind, the ratios, warm / limit as the
//! median of the rounds' own ratios with its spread, the pool's idle cost, throughput and the
//! MCP round trips.

use std::time::Duration;

use super::{BenchArgs, Measured, Rate, Samples, cpus, ratio};
use crate::sandbox::Timings;

/// A spread (the middle half of the rounds' ratios) wider than this share of their median is
/// too wide to tell a change of the code from the machine's noise.
const WIDEST_CONCLUSIVE_SPREAD: f64 = 0.25;

pub(super) fn print(measured: &Measured, args: BenchArgs) {
    let samples = &measured.samples;
    println!(
        "file-agent bench: {} rounds (+ {} of warm and limit), medians (ms); script: pandas + xlsxwriter, 1,000 rows to one .xlsx\n",
        args.runs, args.pairs
    );
    phases(samples);
    kinds(samples);
    rounds(&samples.rounds);
    if let Some(idle) = measured.idle {
        println!("\nthe warm pool");
        println!(
            "{:<38}{:>10.1}",
            "a warm container when READY (MiB)", idle.ready_mib
        );
        println!(
            "{:<38}{:>10.1}",
            "and once idle priming is done (MiB)", idle.primed_mib
        );
        println!(
            "{:<38}{:>10.1}",
            "idle priming, after READY (s, about)",
            idle.priming.as_secs_f64()
        );
        println!(
            "{:<38}{:>10.1}",
            "refill after an attempt (ms)",
            ms(median(samples.refill.clone()))
        );
    }
    if !measured.rates.is_empty() {
        throughput(&measured.rates, args);
    }
    if !measured.mcp.0.is_empty() {
        mcp(&measured.mcp, samples);
    }
    if let Some(cost) = &measured.traces {
        traces(cost);
    }
}

/// The phases of a cold and a warm attempt.
fn phases(samples: &Samples) {
    type Pick = fn(&Timings) -> Duration;
    let rows: [(&str, Pick); 7] = [
        ("create + verify", |t| t.create),
        ("attach + start", |t| t.start),
        ("send the request", |t| t.copy_in),
        ("request sent to script end", |t| t.run),
        ("logs after exit", |t| t.logs),
        ("copy out", |t| t.copy_out),
        ("whole attempt (removal follows)", |t| t.total),
    ];
    println!("{:<34}{:>10}{:>10}", "phase of an attempt", "cold", "warm");
    for (name, pick) in rows {
        println!(
            "{name:<34}{:>10.1}{:>10.1}",
            ms(phase(&samples.cold, pick)),
            ms(phase(&samples.warm, pick))
        );
    }
}

/// Every kind's median, and the ratios between them.
fn kinds(samples: &Samples) {
    let cold = phase(&samples.cold, |t| t.total);
    let warm = phase(&samples.warm, |t| t.total);
    let docker_run = median(samples.docker_run.clone());
    let subprocess = median(samples.subprocess.clone());
    let limit = median(samples.limit.clone());
    println!();
    for (name, value) in [
        ("cold attempt", cold),
        ("warm attempt", warm),
        ("docker run --rm (CLI)", docker_run),
        ("plain python3 subprocess", subprocess),
        ("the limit (body, libraries loaded)", limit),
    ] {
        println!("{name:<38}{:>10.1}", ms(value));
    }
    println!("\nratios of the medians (below 1: the first is faster)");
    for (name, a, b) in [
        ("warm attempt / plain subprocess", warm, subprocess),
        ("cold attempt / plain subprocess", cold, subprocess),
        ("warm attempt / docker run --rm", warm, docker_run),
        ("cold attempt / docker run --rm", cold, docker_run),
    ] {
        println!("{name:<38}{:>10.2}", ratio(a, b));
    }
}

/// Warm / limit: the median of the rounds' ratios, the middle half's range, and whether that
/// range is narrow enough to conclude from.
fn rounds(ratios: &[f64]) {
    let Some(spread) = Spread::of(ratios) else {
        return;
    };
    println!(
        "\nwarm attempt / the limit, median of {} rounds: {:.2} (middle half {:.2} to {:.2}, all {:.2} to {:.2})",
        ratios.len(),
        spread.median,
        spread.lower_quartile,
        spread.upper_quartile,
        spread.min,
        spread.max
    );
    if spread.conclusive() {
        println!("the spread is narrow enough to compare with another run's");
    } else {
        println!(
            "the spread is too wide to conclude (the middle half spans more than {:.0}% of the median): the machine is busy; run again when it is quiet, or with more --pairs",
            WIDEST_CONCLUSIVE_SPREAD * 100.0
        );
    }
}

/// The rounds' ratios summed up.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Spread {
    median: f64,
    lower_quartile: f64,
    upper_quartile: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Option<Self> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = |share: f64| sorted[((sorted.len() - 1) as f64 * share).round() as usize];
        (!sorted.is_empty()).then(|| Self {
            median: at(0.5),
            lower_quartile: at(0.25),
            upper_quartile: at(0.75),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
        })
    }

    fn conclusive(&self) -> bool {
        self.upper_quartile - self.lower_quartile <= WIDEST_CONCLUSIVE_SPREAD * self.median
    }
}

fn throughput(rates: &[(&str, Rate)], args: BenchArgs) {
    println!(
        "\nthroughput: {} attempts, {} at a time, on {} CPUs",
        args.throughput,
        args.concurrency,
        cpus()
    );
    println!("{:<24}{:>14}{:>22}", "", "attempts/s", "host CPU s/attempt");
    for (name, rate) in rates {
        println!(
            "{name:<24}{:>14.2}{:>22.2}",
            rate.per_second,
            rate.cpu_per_attempt.as_secs_f64()
        );
    }
    let find = |name: &str| rates.iter().find(|(n, _)| *n == name).map(|(_, r)| *r);
    if let (Some(cold), Some(warm), Some(plain)) = (
        find("cold attempts"),
        find("warm attempts"),
        find("plain subprocesses"),
    ) {
        println!(
            "warm / cold: {:.2}x; warm / plain subprocess: {:.2}x; cold / plain subprocess: {:.2}x",
            warm.per_second / cold.per_second,
            warm.per_second / plain.per_second,
            cold.per_second / plain.per_second
        );
    }
}

fn mcp(calls: &(Vec<Duration>, Vec<Duration>), samples: &Samples) {
    let (cold_call, warm_call) = (median(calls.0.clone()), median(calls.1.clone()));
    let docker_run = median(samples.docker_run.clone());
    let subprocess = median(samples.subprocess.clone());
    println!("\nrun_python over MCP (rmcp client, real server, local store)");
    println!("{:<38}{:>10.1}", "pool off (cold)", ms(cold_call));
    println!("{:<38}{:>10.1}", "pool on (warm)", ms(warm_call));
    println!(
        "warm call / docker run --rm: {:.2}; warm call / plain subprocess: {:.2}; cold call / plain subprocess: {:.2}",
        ratio(warm_call, docker_run),
        ratio(warm_call, subprocess),
        ratio(cold_call, subprocess)
    );
}

/// Warm calls with traces off and on: medians, and on / off as the median of the rounds' ratios.
fn traces(cost: &super::traces::TracesCost) {
    let (off, on) = (median(cost.off.clone()), median(cost.on.clone()));
    println!(
        "\nrun_python over MCP, warm, traces off and on (OTLP/HTTP to a receiver in this process)"
    );
    println!("{:<38}{:>10.1}", "traces off", ms(off));
    println!("{:<38}{:>10.1}", "traces on", ms(on));
    let ratios: Vec<f64> = cost
        .on
        .iter()
        .zip(&cost.off)
        .map(|(&on, &off)| ratio(on, off))
        .collect();
    if let Some(spread) = Spread::of(&ratios) {
        println!(
            "on / off, median of {} rounds: {:.3} (middle half {:.3} to {:.3}); {} exports ({:.1} KiB) received, {} spans dropped",
            ratios.len(),
            spread.median,
            spread.lower_quartile,
            spread.upper_quartile,
            cost.exports,
            cost.bytes as f64 / 1024.0,
            cost.dropped
        );
    }
}

fn phase(list: &[Timings], pick: fn(&Timings) -> Duration) -> Duration {
    median(list.iter().map(pick).collect())
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn the_spread_is_the_rounds_middle_half_and_says_when_it_is_too_wide() {
        let narrow = Spread::of(&[1.3, 1.4, 1.35, 1.45, 1.38]).unwrap();
        assert_eq!(narrow.median, 1.38);
        assert_eq!((narrow.lower_quartile, narrow.upper_quartile), (1.35, 1.4));
        assert_eq!((narrow.min, narrow.max), (1.3, 1.45));
        assert!(narrow.conclusive());
        let wide = Spread::of(&[1.2, 1.5, 2.4, 3.0, 1.9]).unwrap();
        assert!(!wide.conclusive(), "{wide:?}");
        assert_eq!(Spread::of(&[]), None);
    }
}
