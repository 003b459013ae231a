//! The alphabetical and numerical policies, and Go's `strconv.ParseFloat`, which decides what
//! the numerical policy accepts as a number.

/// `ASC` or `DESC` after Flux upper-cases the spec's `order`; empty means `ASC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    Asc,
    Desc,
}

impl Order {
    /// Flux's `strings.ToUpper` then a match; the error names the upper-cased value.
    pub(crate) fn parse(order: &str) -> Result<Order, String> {
        let upper = go_to_upper(order);
        match upper.as_str() {
            "" | "ASC" => Ok(Order::Asc),
            "DESC" => Ok(Order::Desc),
            _ => Err(format!(
                "invalid order argument provided: '{upper}', must be one of: ASC, DESC"
            )),
        }
    }
}

/// Go's `strings.ToUpper` maps each character on its own (simple case mapping): `ß` stays.
fn go_to_upper(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut up = c.to_uppercase();
            match (up.next(), up.next()) {
                (Some(u), None) => u,
                _ => c,
            }
        })
        .collect()
}

/// `ASC` picks the byte-wise greatest tag, `DESC` the least.
pub(crate) fn alphabetical<'a>(order: Order, tags: &[&'a str]) -> Option<&'a str> {
    match order {
        Order::Asc => tags.iter().copied().max(),
        Order::Desc => tags.iter().copied().min(),
    }
}

/// `ASC` picks the greatest number, `DESC` the least; among equal values the later tag wins,
/// as in Flux's loop. Any tag that is not a number fails the whole policy, naming the tag.
pub(crate) fn numerical<'a>(order: Order, tags: &[&'a str]) -> Result<Option<&'a str>, &'a str> {
    let mut latest: Option<(&str, f64)> = None;
    for &tag in tags {
        let value = parse_go_float(tag).ok_or(tag)?;
        // Written as Flux's "skip when worse" so that NaN behaves the same way.
        let skip = latest.is_some_and(|(_, best)| match order {
            Order::Asc => value < best,
            Order::Desc => value > best,
        });
        if !skip {
            latest = Some((tag, value));
        }
    }
    Ok(latest.map(|(tag, _)| tag))
}

/// `strconv.ParseFloat(s, 64)` without error: an optional sign, then `inf`/`infinity`/`nan`
/// (any case; no sign on `nan`), a decimal with an optional exponent, or a hexadecimal
/// mantissa with a mandatory `p` exponent; `_` only between digits. A finite literal too
/// large for an f64 is a range error, so `None`.
pub(crate) fn parse_go_float(s: &str) -> Option<f64> {
    let (negative, body) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if lower == "nan" {
        return (body.len() == s.len()).then_some(f64::NAN);
    }
    if body.contains('_') && !underscores_ok(body) {
        return None;
    }
    let digits: String = lower.chars().filter(|&c| c != '_').collect();
    let magnitude = match digits.strip_prefix("0x") {
        Some(hex) if !hex.is_empty() => parse_hex_float(hex)?,
        _ => parse_decimal(&digits)?,
    };
    if magnitude.is_infinite() {
        return None;
    }
    Some(if negative { -magnitude } else { magnitude })
}

/// Go's rule: an underscore must sit between digits (or after a base prefix).
fn underscores_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = b.len() >= 2 && b[0] == b'0' && b[1].eq_ignore_ascii_case(&b'x');
    let (mut i, mut saw) = if hex { (2, '0') } else { (0, '^') };
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = '0';
        } else if c == b'_' {
            if saw != '0' {
                return false;
            }
            saw = '_';
        } else if saw == '_' {
            return false;
        } else {
            saw = '!';
        }
        i += 1;
    }
    saw != '_'
}

/// `digits[.digits][e[+-]digits]` with at least one mantissa digit.
fn parse_decimal(s: &str) -> Option<f64> {
    let (mantissa, exponent) = match s.split_once('e') {
        Some((m, e)) => (m, Some(e)),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits_only = |x: &str| x.bytes().all(|b| b.is_ascii_digit());
    if int.len() + frac.len() == 0 || !digits_only(int) || !digits_only(frac) {
        return None;
    }
    if let Some(e) = exponent {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        if e.is_empty() || !digits_only(e) {
            return None;
        }
    }
    // Rust's parser is correctly rounded like Go's and accepts this same grammar.
    s.parse::<f64>().ok()
}

/// `hexdigits[.hexdigits]p[+-]digits`; the value is mantissa × 2^exponent.
fn parse_hex_float(s: &str) -> Option<f64> {
    let (mantissa, exponent) = s.split_once('p')?;
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let hex_only = |x: &str| x.bytes().all(|b| b.is_ascii_hexdigit());
    if int.len() + frac.len() == 0 || !hex_only(int) || !hex_only(frac) {
        return None;
    }
    let (sign, e) = match exponent.as_bytes().first() {
        Some(b'-') => (-1i64, &exponent[1..]),
        Some(b'+') => (1, &exponent[1..]),
        _ => (1, exponent),
    };
    if e.is_empty() || !e.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Go stops accumulating the exponent at 10000; the result is 0 or infinite by then.
    let e = e.bytes().fold(0i64, |acc, b| {
        if acc < 10_000 {
            acc * 10 + i64::from(b - b'0')
        } else {
            acc
        }
    });
    let mut value = 0f64;
    for d in int.chars().chain(frac.chars()) {
        value = value * 16.0 + f64::from(d.to_digit(16)?);
    }
    let shift = sign * e - 4 * frac.len() as i64;
    // In two halves, so that a subnormal result does not underflow on the way.
    let shift = shift.clamp(-2200, 2200) as i32;
    Some(value * 2f64.powi(shift / 2) * 2f64.powi(shift - shift / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_upper_cased_and_defaults_to_asc() {
        assert_eq!(Order::parse(""), Ok(Order::Asc));
        assert_eq!(Order::parse("asc"), Ok(Order::Asc));
        assert_eq!(Order::parse("Desc"), Ok(Order::Desc));
        assert_eq!(Order::parse("DESC"), Ok(Order::Desc));
        assert_eq!(
            Order::parse("up"),
            Err("invalid order argument provided: 'UP', must be one of: ASC, DESC".to_string())
        );
        assert_eq!(
            Order::parse("straße"),
            Err("invalid order argument provided: 'STRAßE', must be one of: ASC, DESC".to_string())
        );
    }

    #[test]
    fn alphabetical_is_byte_order() {
        let releases = ["xenial", "yakkety", "zesty", "artful", "bionic"];
        assert_eq!(alphabetical(Order::Asc, &releases), Some("zesty"));
        assert_eq!(alphabetical(Order::Desc, &releases), Some("artful"));
        // Byte order: upper case before lower case, `10` before `9`.
        assert_eq!(alphabetical(Order::Asc, &["a", "B", "Z"]), Some("a"));
        assert_eq!(alphabetical(Order::Asc, &["9", "10"]), Some("9"));
        let stamps = [
            "RELEASE.2024-01-01T00-00-00Z",
            "RELEASE.2024-11-02T10-00-00Z",
            "RELEASE.2023-12-31T23-59-59Z",
        ];
        assert_eq!(
            alphabetical(Order::Asc, &stamps),
            Some("RELEASE.2024-11-02T10-00-00Z")
        );
        assert_eq!(alphabetical(Order::Asc, &[]), None);
    }

    #[test]
    fn numerical_picks_by_value() {
        let tags = ["1", "10", "9", "-3", "2.5", "1e1"];
        assert_eq!(
            numerical(Order::Asc, &tags),
            Ok(Some("1e1")),
            "10 and 1e1 tie: the later wins"
        );
        assert_eq!(numerical(Order::Desc, &tags), Ok(Some("-3")));
        assert_eq!(numerical(Order::Asc, &["0100", "99"]), Ok(Some("0100")));
        assert_eq!(
            numerical(Order::Asc, &["1", "a", "b"]),
            Err("a"),
            "the first bad tag is named"
        );
        assert_eq!(
            numerical(Order::Asc, &["20260528-153652"]),
            Err("20260528-153652")
        );
        assert_eq!(numerical(Order::Asc, &[]), Ok(None));
        // NaN never compares, so each later tag replaces it and it replaces nothing.
        assert_eq!(numerical(Order::Asc, &["5", "nan"]), Ok(Some("nan")));
        assert_eq!(numerical(Order::Asc, &["nan", "5", "3"]), Ok(Some("5")));
    }

    #[test]
    fn go_float_syntax() {
        let cases: &[(&str, Option<f64>)] = &[
            ("0", Some(0.0)),
            ("42", Some(42.0)),
            ("+42", Some(42.0)),
            ("-42", Some(-42.0)),
            ("1.5", Some(1.5)),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            ("1e3", Some(1000.0)),
            ("1E-2", Some(0.01)),
            ("1_000", Some(1000.0)),
            ("1__000", None),
            ("_1", None),
            ("1_", None),
            ("1_.5", None),
            ("0x1p4", Some(16.0)),
            ("0X1.8P1", Some(3.0)),
            ("0x_1p0", Some(1.0)),
            ("0x1p-1074", Some(f64::from_bits(1))),
            ("0x10", None),
            ("0x", None),
            ("inf", Some(f64::INFINITY)),
            ("-Infinity", Some(f64::NEG_INFINITY)),
            ("infin", None),
            ("1e400", None),
            ("1e-400", Some(0.0)),
            ("20260528153652", Some(20260528153652.0)),
            ("", None),
            ("-", None),
            (".", None),
            ("e5", None),
            ("1e", None),
            ("1e+", None),
            ("1.2.3", None),
            ("v1", None),
            ("1-2", None),
            ("+nan", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_go_float(input), *want, "{input:?}");
        }
        assert!(parse_go_float("NaN").is_some_and(f64::is_nan));
    }
}
