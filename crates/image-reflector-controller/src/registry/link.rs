//! The next page of a tag list: the `Link: <url>; rel="next"` header (RFC 8288), resolved
//! against the page's URL and kept on the registry's own scheme, host and port, so a registry
//! cannot send the scan (and its credentials) elsewhere.

use url::Url;

/// The next page's URL, `None` when the header names no next page.
pub(crate) fn next_page(header: &str, current: &Url) -> Result<Option<Url>, String> {
    for link in split_links(header)? {
        let (target, params) = link;
        if !is_next(params) {
            continue;
        }
        let next = current
            .join(target)
            .map_err(|e| format!("invalid Link URL '{target}': {e}"))?;
        if next.scheme() != current.scheme()
            || next.host_str() != current.host_str()
            || next.port_or_known_default() != current.port_or_known_default()
        {
            return Err(format!(
                "Link to the next page leaves the registry: {} is not on {}",
                super::display_url(&next),
                origin(current)
            ));
        }
        if next == *current {
            return Err(format!(
                "Link to the next page points at the same page: {}",
                super::display_url(&next)
            ));
        }
        return Ok(Some(next));
    }
    Ok(None)
}

fn origin(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// `<target>; params` entries of a Link value; commas inside `<>` or quotes do not split.
fn split_links(header: &str) -> Result<Vec<(&str, &str)>, String> {
    let mut links = Vec::new();
    let mut rest = header.trim();
    while !rest.is_empty() {
        let inner = rest
            .strip_prefix('<')
            .ok_or_else(|| format!("failed to parse Link header: missing '<' in: {header}"))?;
        let end = inner
            .find('>')
            .ok_or_else(|| format!("failed to parse Link header: missing '>' in: {header}"))?;
        let target = &inner[..end];
        let after = &inner[end + 1..];
        let mut in_quotes = false;
        let split = after
            .char_indices()
            .find(|&(_, c)| {
                if c == '"' {
                    in_quotes = !in_quotes;
                }
                c == ',' && !in_quotes
            })
            .map_or(after.len(), |(i, _)| i);
        links.push((target, &after[..split]));
        rest = after[split..].trim_start_matches(',').trim();
    }
    Ok(links)
}

/// Whether `; rel=next` (or `rel="next ..."`, a list of relation types) is among the params.
fn is_next(params: &str) -> bool {
    params.split(';').any(|param| {
        let Some((key, value)) = param.split_once('=') else {
            return false;
        };
        key.trim().eq_ignore_ascii_case("rel")
            && value
                .trim()
                .trim_matches('"')
                .split_ascii_whitespace()
                .any(|rel| rel.eq_ignore_ascii_case("next"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "http://127.0.0.1:5000/v2/foo/tags/list?n=2";

    #[test]
    fn next_pages() {
        let table = [
            ("", None),
            (
                r#"</v2/foo/tags/list?n=2&last=b>; rel="next""#,
                Some("http://127.0.0.1:5000/v2/foo/tags/list?n=2&last=b"),
            ),
            // Absolute, with the port: kept (Nexus lost it, image-reflector-controller#343).
            (
                r#"<http://127.0.0.1:5000/v2/foo/tags/list?n=2&last=b>; rel="next""#,
                Some("http://127.0.0.1:5000/v2/foo/tags/list?n=2&last=b"),
            ),
            // Relative to the page's path.
            (
                "<list?last=c>; rel=next",
                Some("http://127.0.0.1:5000/v2/foo/tags/list?last=c"),
            ),
            // Quay's token paging; the relation among others; other links first.
            (
                r#"</v2/x/y>; rel="prev", </v2/foo/tags/list?next_page=abc%2C1>; rel="first next""#,
                Some("http://127.0.0.1:5000/v2/foo/tags/list?next_page=abc%2C1"),
            ),
            // A link that is not `next` ends the listing.
            (r#"</v2/foo/tags/list?n=2&last=b>; rel="prev""#, None),
        ];
        let current = Url::parse(PAGE).unwrap();
        for (header, expected) in table {
            let next = next_page(header, &current).unwrap_or_else(|e| panic!("{header}: {e}"));
            assert_eq!(next.as_ref().map(Url::as_str), expected, "{header}");
        }
    }

    #[test]
    fn refused_links() {
        let table = [
            (
                r#"<https://127.0.0.1:5000/v2/foo/tags/list?last=b>; rel="next""#,
                "Link to the next page leaves the registry: https://127.0.0.1:5000/v2/foo/tags/list?last=b \
                 is not on http://127.0.0.1:5000",
            ),
            (
                r#"<http://127.0.0.1/v2/foo/tags/list?last=b>; rel="next""#,
                "Link to the next page leaves the registry: http://127.0.0.1/v2/foo/tags/list?last=b \
                 is not on http://127.0.0.1:5000",
            ),
            (
                r#"<//evil.example:5000/v2/foo/tags/list>; rel="next""#,
                "Link to the next page leaves the registry: http://evil.example:5000/v2/foo/tags/list \
                 is not on http://127.0.0.1:5000",
            ),
            (
                r#"<http://user:secret@evil.example/x>; rel="next""#,
                "Link to the next page leaves the registry: http://evil.example/x is not on http://127.0.0.1:5000",
            ),
            (
                r#"<?n=2>; rel="next""#,
                "Link to the next page points at the same page: http://127.0.0.1:5000/v2/foo/tags/list?n=2",
            ),
            (
                r#"/v2/foo/tags/list?last=b; rel="next""#,
                r#"failed to parse Link header: missing '<' in: /v2/foo/tags/list?last=b; rel="next""#,
            ),
            (
                r#"</v2/foo/tags/list?last=b; rel="next""#,
                r#"failed to parse Link header: missing '>' in: </v2/foo/tags/list?last=b; rel="next""#,
            ),
        ];
        let current = Url::parse(PAGE).unwrap();
        for (header, message) in table {
            assert_eq!(next_page(header, &current), Err(message.to_string()), "{header}");
        }
    }
}
