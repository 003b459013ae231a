//! A crafted Git smart-HTTP server (protocol version 2) on 127.0.0.1: it serves a pack the test
//! writes object by object, so a repository can hold what `git` itself never writes (duplicate
//! or unsorted tree entries, hostile symlinks). It answers the capability advertisement and any
//! fetch with that pack, so bases name the commit by its full id (no `ls-refs`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

use flate2::Compression;
use flate2::write::ZlibEncoder;
use sha1::{Digest, Sha1};

pub type Oid = [u8; 20];

const COMMIT: u8 = 1;
const TREE: u8 = 2;
const BLOB: u8 = 3;

/// The objects of a repository, in the order the pack lists them.
#[derive(Default)]
pub struct Repository {
    objects: Vec<(u8, Vec<u8>)>,
}

impl Repository {
    fn add(&mut self, kind: u8, data: Vec<u8>) -> Oid {
        let name = ["", "commit", "tree", "blob"][usize::from(kind)];
        let mut hash = Sha1::new();
        hash.update(format!("{name} {}\0", data.len()));
        hash.update(&data);
        self.objects.push((kind, data));
        hash.finalize().into()
    }

    pub fn blob(&mut self, text: &str) -> Oid {
        self.add(BLOB, text.as_bytes().to_vec())
    }

    /// A tree of `(mode, name, object)` entries, listed exactly as given.
    pub fn tree(&mut self, entries: &[(&str, &str, Oid)]) -> Oid {
        let mut data = Vec::new();
        for (mode, name, id) in entries {
            data.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            data.extend_from_slice(id);
        }
        self.add(TREE, data)
    }

    /// A commit of `tree`; returns its id in hex.
    pub fn commit(&mut self, tree: Oid) -> String {
        let who = "t <t@example.invalid> 0 +0000";
        let text = format!(
            "tree {}\nauthor {who}\ncommitter {who}\n\ncrafted\n",
            hex::encode(tree)
        );
        hex::encode(self.add(COMMIT, text.into_bytes()))
    }

    /// The objects as a version 2 packfile, every one whole.
    fn pack(&self) -> Vec<u8> {
        let mut out = b"PACK\0\0\0\x02".to_vec();
        out.extend_from_slice(&(self.objects.len() as u32).to_be_bytes());
        for (kind, data) in &self.objects {
            let mut size = data.len();
            let mut byte = (kind << 4) | (size & 0x0f) as u8;
            size >>= 4;
            while size > 0 {
                out.push(byte | 0x80);
                byte = (size & 0x7f) as u8;
                size >>= 7;
            }
            out.push(byte);
            let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
            z.write_all(data).unwrap();
            out.extend(z.finish().unwrap());
        }
        let sum = Sha1::digest(&out);
        out.extend_from_slice(&sum);
        out
    }
}

fn pkt(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", data.len() + 4).into_bytes();
    out.extend_from_slice(data);
    out
}

/// Serves `repository` until the test process ends; returns its clone URL.
pub fn serve(repository: &Repository) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mut advertisement = pkt(b"# service=git-upload-pack\n");
    advertisement.extend_from_slice(b"0000");
    for line in ["version 2\n", "ls-refs\n", "fetch=shallow\n"] {
        advertisement.extend(pkt(line.as_bytes()));
    }
    advertisement.extend_from_slice(b"0000");
    let mut fetched = pkt(b"packfile\n");
    for chunk in repository.pack().chunks(8192) {
        fetched.extend(pkt(&[&[1u8][..], chunk].concat()));
    }
    fetched.extend_from_slice(b"0000");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            let mut length = 0;
            let mut line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let _ = reader.by_ref().take(length).read_to_end(&mut Vec::new());
            let body = if request_line.contains("/info/refs?service=git-upload-pack") {
                &advertisement
            } else {
                &fetched
            };
            let mut stream = reader.into_inner();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(body);
        }
    });
    format!("http://{addr}/crafted.git")
}
