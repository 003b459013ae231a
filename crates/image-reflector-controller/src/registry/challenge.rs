//! The `WWW-Authenticate` challenge a registry answers `/v2/` with (RFC 7235 syntax): Basic, or
//! Bearer with the token service's realm.

/// How the registry wants requests authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        /// A scope the registry names itself, asked for beside the pull scope.
        scope: Option<String>,
    },
}

/// Parses the first challenge of a `WWW-Authenticate` value. Parameter names are matched
/// without case, values may be tokens or quoted strings (commas inside quotes are kept).
pub(crate) fn parse_challenge(header: &str) -> Result<Challenge, String> {
    let header = header.trim();
    let (scheme, rest) = header.split_once([' ', '\t']).unwrap_or((header, ""));
    let params = parse_params(rest)?;
    let param = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.clone())
    };
    match scheme.to_ascii_lowercase().as_str() {
        "basic" => Ok(Challenge::Basic),
        "bearer" => {
            let realm = param("realm").filter(|realm| !realm.is_empty()).ok_or_else(|| {
                format!("malformed WWW-Authenticate, bearer challenge without realm: {header}")
            })?;
            Ok(Challenge::Bearer {
                realm,
                service: param("service").filter(|s| !s.is_empty()),
                scope: param("scope").filter(|s| !s.is_empty()),
            })
        }
        "" => Err("empty WWW-Authenticate header".into()),
        other => Err(format!("unsupported authentication scheme '{other}'")),
    }
}

/// `key=value` pairs separated by commas; stops at the first entry that is not one (the start
/// of a second challenge).
fn parse_params(input: &str) -> Result<Vec<(String, String)>, String> {
    let mut params = Vec::new();
    let mut rest = input.trim_start();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else { break };
        let key = rest[..eq].trim();
        if key.is_empty() || key.contains([' ', ',', '"']) {
            break;
        }
        rest = rest[eq + 1..].trim_start();
        let value;
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut out = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => out.extend(chars.next().map(|(_, c)| c)),
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    c => out.push(c),
                }
            }
            let end = end.ok_or_else(|| format!("unterminated quoted value for '{key}'"))?;
            value = out;
            rest = &quoted[end + 1..];
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            value = rest[..end].trim().to_string();
            rest = &rest[end..];
        }
        params.push((key.to_string(), value));
        rest = rest.trim_start();
        match rest.strip_prefix(',') {
            Some(after) => rest = after.trim_start(),
            None if rest.is_empty() => {}
            None => return Err(format!("expected ',' after '{key}' in WWW-Authenticate")),
        }
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(realm: &str, service: Option<&str>, scope: Option<&str>) -> Challenge {
        Challenge::Bearer {
            realm: realm.into(),
            service: service.map(Into::into),
            scope: scope.map(Into::into),
        }
    }

    #[test]
    fn challenges() {
        let table = [
            (r#"Basic realm="Registry Realm""#, Challenge::Basic),
            ("basic", Challenge::Basic),
            ("BASIC realm=x", Challenge::Basic),
            (
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io""#,
                bearer("https://auth.docker.io/token", Some("registry.docker.io"), None),
            ),
            (
                r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:user/image:pull""#,
                bearer(
                    "https://ghcr.io/token",
                    Some("ghcr.io"),
                    Some("repository:user/image:pull"),
                ),
            ),
            // Spaces after commas, unquoted values, names in any case.
            (
                "bearer Realm=https://r.example/token , SERVICE=reg",
                bearer("https://r.example/token", Some("reg"), None),
            ),
            // A comma inside a quoted scope does not split it (ggcr's parser would).
            (
                r#"Bearer realm="https://r/t",scope="repository:a:pull,push""#,
                bearer("https://r/t", None, Some("repository:a:pull,push")),
            ),
            (
                r#"Bearer realm="https://r/t\"x",service="""#,
                bearer("https://r/t\"x", None, None),
            ),
        ];
        for (header, expected) in table {
            assert_eq!(parse_challenge(header), Ok(expected), "{header}");
        }
    }

    #[test]
    fn bad_challenges() {
        let table = [
            ("", "empty WWW-Authenticate header"),
            ("Negotiate abc", "unsupported authentication scheme 'negotiate'"),
            (
                r#"Bearer service="x""#,
                r#"malformed WWW-Authenticate, bearer challenge without realm: Bearer service="x""#,
            ),
            (r#"Bearer realm="x"#, "unterminated quoted value for 'realm'"),
            (
                r#"Bearer realm="x" service="y""#,
                "expected ',' after 'realm' in WWW-Authenticate",
            ),
        ];
        for (header, message) in table {
            assert_eq!(parse_challenge(header), Err(message.to_string()), "{header}");
        }
    }
}
