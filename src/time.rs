//! UTC timestamps in RFC 3339 without a date-time crate: days since the epoch to a civil date
//! and back (Howard Hinnant's algorithms). The audit trail writes them; the sandbox reads
//! Docker's (`2026-11-22T03:40:00.123456789Z`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, as `2026-11-22T03:40:00.123Z`.
pub fn rfc3339_now() -> String {
    format_rfc3339(SystemTime::now())
}

/// `at`, as `2026-11-22T03:40:00.123Z` (the epoch for an instant before it).
pub fn format_rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    rfc3339(since.as_secs() as i64, since.subsec_millis())
}

/// A UTC timestamp `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, as Docker writes them; `None` for anything
/// else (other offsets included).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date = date.splitn(3, '-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock = clock.splitn(3, ':').map(str::parse::<i64>);
    let (hour, minute, second) = (
        clock.next()?.ok()?,
        clock.next()?.ok()?,
        clock.next()?.ok()?,
    );
    let in_range = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && (0..24).contains(&hour)
        && (0..60).contains(&minute)
        && (0..=60).contains(&second);
    if !in_range || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos: u32 = format!("{:0<9}", &fraction[..fraction.len().min(9)])
        .parse()
        .ok()?;
    let seconds = days_from_civil(year, month as u32, day as u32) * 86_400
        + hour * 3600
        + minute * 60
        + second;
    let seconds = u64::try_from(seconds).ok()?;
    Some(UNIX_EPOCH + Duration::new(seconds, nanos))
}

fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = year - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn rfc3339(seconds: i64, millis: u32) -> String {
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants_format_as_rfc3339() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(1_795_000_000, 999), "2026-11-18T11:06:40.999Z");
    }

    #[test]
    fn dockers_timestamps_parse_back() {
        let at = |s: u64, n: u32| Some(UNIX_EPOCH + Duration::new(s, n));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), at(0, 0));
        assert_eq!(
            parse_rfc3339("2026-11-18T11:06:40.999Z"),
            at(1_795_000_000, 999_000_000)
        );
        assert_eq!(
            parse_rfc3339("2000-02-29T00:00:00.123456789Z"),
            at(951_782_400, 123_456_789)
        );
        // Docker's "never finished".
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), None);
        for bad in [
            "",
            "2026-11-18",
            "2026-13-01T00:00:00Z",
            "2026-11-18T11:06:40+01:00",
            "2026-11-18T11:06:40.x1Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        let now = SystemTime::now();
        let back = parse_rfc3339(&format_rfc3339(now)).unwrap();
        assert!(now.duration_since(back).unwrap() < Duration::from_millis(1));
    }
}
