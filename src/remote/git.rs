//! Git's smart HTTP protocol, version 2: the capability advertisement, `ls-refs` to resolve
//! a ref, and a shallow `fetch` of one commit, whose packfile comes back side-band framed.

use hyper::Method;

use super::http::{Call, Http};
use super::pack::Oid;
use super::pktline::{self, DELIM, FLUSH, Pkt, Reader};

/// The most a ref listing may take: it is a few lines per matching ref.
const MAX_LISTING_BYTES: u64 = 4 << 20;

/// One repository reached over smart HTTP.
pub(crate) struct Repository<'a> {
    pub http: &'a Http,
    /// The repository URL without a trailing slash (`https://host/org/repo.git`).
    pub url: String,
}

/// What the server said it can do.
struct Capabilities {
    shallow: bool,
}

impl Repository<'_> {
    async fn advertisement(&self) -> Result<Capabilities, String> {
        let (status, body) = self
            .http
            .send(
                Call {
                    method: Method::GET,
                    url: format!("{}/info/refs?service=git-upload-pack", self.url),
                    headers: &[("Git-Protocol", "version=2")],
                    body: Vec::new(),
                },
                MAX_LISTING_BYTES,
            )
            .await?;
        if !status.is_success() {
            return Err(format!("{}/info/refs: HTTP status {status}", self.url));
        }
        let mut reader = Reader::new(&body);
        let mut first = reader.next_text()?;
        if first.as_deref().is_some_and(|l| l.starts_with("# service=")) {
            // The smart-HTTP preamble: the service line, then a flush.
            if reader.next_pkt()? != Some(Pkt::Flush) {
                return Err("malformed service advertisement".into());
            }
            first = reader.next_text()?;
        }
        if first.as_deref() != Some("version 2") {
            return Err(format!(
                "{} does not speak Git protocol version 2 (a dumb or too old Git server)",
                self.url
            ));
        }
        let mut shallow = false;
        while let Some(line) = reader.next_text()? {
            if let Some(features) = line.strip_prefix("fetch=") {
                shallow = features.split(' ').any(|f| f == "shallow");
            }
        }
        Ok(Capabilities { shallow })
    }

    async fn command(&self, body: Vec<u8>, max_bytes: u64) -> Result<Vec<u8>, String> {
        let (status, response) = self
            .http
            .send(
                Call {
                    method: Method::POST,
                    url: format!("{}/git-upload-pack", self.url),
                    headers: &[
                        ("Git-Protocol", "version=2"),
                        ("Content-Type", "application/x-git-upload-pack-request"),
                        ("Accept", "application/x-git-upload-pack-result"),
                    ],
                    body,
                },
                max_bytes,
            )
            .await?;
        if !status.is_success() {
            return Err(format!("{}/git-upload-pack: HTTP status {status}", self.url));
        }
        Ok(response)
    }

    /// The commit `git_ref` names: "" is the default branch (HEAD); otherwise, as `git
    /// fetch` reads a name: exact, `refs/`, `refs/tags/`, `refs/heads/`; or a full commit id.
    async fn resolve(&self, git_ref: &str) -> Result<Oid, String> {
        let candidates = ref_candidates(git_ref);
        let mut body = pktline::line("command=ls-refs\n");
        body.extend_from_slice(DELIM);
        body.extend(pktline::line("peel\n"));
        for name in &candidates {
            body.extend(pktline::line(&format!("ref-prefix {name}\n")));
        }
        body.extend_from_slice(FLUSH);
        let listing = self.command(body, MAX_LISTING_BYTES).await?;
        let refs = parse_ls_refs(&listing)?;
        candidates
            .iter()
            .find_map(|name| refs.iter().find(|(n, _)| n == name).map(|(_, id)| *id))
            .ok_or_else(|| match git_ref {
                "" => "the repository has no default branch (HEAD)".to_string(),
                r => format!("ref '{r}' not found in the repository"),
            })
    }

    /// The commit `git_ref` names, and a fetch of it unless `cached` says it is at hand: a
    /// pack holding the commit and its tree (only that commit when the server can).
    pub(crate) async fn fetch(
        &self,
        git_ref: &str,
        cached: impl FnOnce(&Oid) -> bool,
        max_bytes: u64,
    ) -> Result<(Oid, Option<Vec<u8>>), String> {
        let capabilities = self.advertisement().await?;
        let commit = match full_commit_id(git_ref) {
            Some(id) => id,
            None => self.resolve(git_ref).await?,
        };
        if cached(&commit) {
            return Ok((commit, None));
        }
        let mut body = pktline::line("command=fetch\n");
        body.extend_from_slice(DELIM);
        body.extend(pktline::line("ofs-delta\n"));
        body.extend(pktline::line("no-progress\n"));
        if capabilities.shallow {
            body.extend(pktline::line("deepen 1\n"));
        }
        body.extend(pktline::line(&format!("want {}\n", hex::encode(commit))));
        body.extend(pktline::line("done\n"));
        body.extend_from_slice(FLUSH);
        let response = self.command(body, max_bytes).await?;
        Ok((commit, Some(packfile_section(&response)?)))
    }
}

/// A 40-digit hex id given as the ref.
pub(crate) fn full_commit_id(git_ref: &str) -> Option<Oid> {
    (git_ref.len() == 40)
        .then(|| hex::decode(git_ref).ok())
        .flatten()
        .and_then(|b| b.try_into().ok())
}

/// Full ref names `git_ref` may stand for, in the order `git` tries them.
fn ref_candidates(git_ref: &str) -> Vec<String> {
    if git_ref.is_empty() {
        return vec!["HEAD".into()];
    }
    ["", "refs/", "refs/tags/", "refs/heads/"]
        .iter()
        .map(|prefix| format!("{prefix}{git_ref}"))
        .collect()
}

/// `ls-refs` lines: `<id> <name>[ symref-target:<t>][ peeled:<id>]`; a tag's peeled commit
/// stands for it.
fn parse_ls_refs(body: &[u8]) -> Result<Vec<(String, Oid)>, String> {
    let mut reader = Reader::new(body);
    let mut refs = Vec::new();
    while let Some(line) = reader.next_text()? {
        if let Some(message) = line.strip_prefix("ERR ") {
            return Err(format!("remote error: {message}"));
        }
        let mut parts = line.split(' ');
        let (Some(id), Some(name)) = (parts.next(), parts.next()) else {
            return Err(format!("malformed ref line '{line}'"));
        };
        let peeled = parts.find_map(|p| p.strip_prefix("peeled:"));
        let id =
            full_commit_id(peeled.unwrap_or(id)).ok_or_else(|| format!("malformed ref line '{line}'"))?;
        refs.push((name.to_string(), id));
    }
    Ok(refs)
}

/// The pack from a `fetch` response, skipping the sections before it.
fn packfile_section(body: &[u8]) -> Result<Vec<u8>, String> {
    let mut reader = Reader::new(body);
    while let Some(pkt) = reader.next_pkt()? {
        if let Pkt::Data(data) = pkt {
            let line = String::from_utf8_lossy(data);
            let line = line.trim_end();
            if line == "packfile" {
                return pktline::demux_sideband(&mut reader);
            }
            if let Some(message) = line.strip_prefix("ERR ") {
                return Err(format!("remote error: {message}"));
            }
        }
    }
    Err("the server sent no packfile".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_tried_as_git_fetch_does() {
        assert_eq!(ref_candidates(""), ["HEAD"]);
        assert_eq!(
            ref_candidates("v1"),
            ["v1", "refs/v1", "refs/tags/v1", "refs/heads/v1"]
        );
    }

    #[test]
    fn a_tag_resolves_to_its_peeled_commit() {
        let (tag, commit) = ("a".repeat(40), "b".repeat(40));
        let mut body = pktline::line(&format!("{tag} refs/tags/v1 peeled:{commit}\n"));
        body.extend(pktline::line(&format!("{commit} refs/heads/main\n")));
        body.extend_from_slice(FLUSH);
        let refs = parse_ls_refs(&body).unwrap();
        assert_eq!(
            refs[0],
            ("refs/tags/v1".to_string(), full_commit_id(&commit).unwrap())
        );
        assert_eq!(refs[1].0, "refs/heads/main");
    }

    #[test]
    fn the_packfile_section_follows_the_others() {
        let mut body = pktline::line("shallow-info\n");
        body.extend(pktline::line(&format!("shallow {}\n", "c".repeat(40))));
        body.extend_from_slice(DELIM);
        body.extend(pktline::line("packfile\n"));
        body.extend_from_slice(b"0009\x01PACK");
        body.extend_from_slice(FLUSH);
        assert_eq!(packfile_section(&body).unwrap(), b"PACK");
        assert_eq!(
            packfile_section(&pktline::line("ERR upload-pack: not our ref\n")).unwrap_err(),
            "remote error: upload-pack: not our ref"
        );
    }

    #[test]
    fn only_full_hex_ids_are_commits() {
        assert!(full_commit_id(&"0".repeat(40)).is_some());
        assert!(full_commit_id("abc123").is_none());
        assert!(full_commit_id(&"z".repeat(40)).is_none());
    }
}
