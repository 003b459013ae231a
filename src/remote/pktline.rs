//! Git's pkt-line framing: four hex digits of length (including themselves), then data;
//! `0000` ends a message (flush), `0001` separates its sections (delim).

/// One unit of a pkt-line stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pkt<'a> {
    Data(&'a [u8]),
    Flush,
    Delim,
    ResponseEnd,
}

/// A data line.
pub(crate) fn line(text: &str) -> Vec<u8> {
    let mut out = format!("{:04x}", text.len() + 4).into_bytes();
    out.extend_from_slice(text.as_bytes());
    out
}

pub(crate) const FLUSH: &[u8] = b"0000";
pub(crate) const DELIM: &[u8] = b"0001";

/// Reads pkt-lines from a byte buffer.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// The next pkt, None at the end of the buffer.
    pub(crate) fn next_pkt(&mut self) -> Result<Option<Pkt<'a>>, String> {
        if self.pos == self.buf.len() {
            return Ok(None);
        }
        let head = self
            .buf
            .get(self.pos..self.pos + 4)
            .ok_or("truncated pkt-line length")?;
        let len = std::str::from_utf8(head)
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or_else(|| format!("invalid pkt-line length {:?}", String::from_utf8_lossy(head)))?;
        self.pos += 4;
        match len {
            0 => Ok(Some(Pkt::Flush)),
            1 => Ok(Some(Pkt::Delim)),
            2 => Ok(Some(Pkt::ResponseEnd)),
            3 => Err("invalid pkt-line length 3".into()),
            _ => {
                let data = self
                    .buf
                    .get(self.pos..self.pos + len - 4)
                    .ok_or("truncated pkt-line")?;
                self.pos += len - 4;
                Ok(Some(Pkt::Data(data)))
            }
        }
    }

    /// The next data line as text without its newline; None at a flush, delim or the end.
    pub(crate) fn next_text(&mut self) -> Result<Option<String>, String> {
        match self.next_pkt()? {
            Some(Pkt::Data(data)) => Ok(Some(
                String::from_utf8_lossy(data).trim_end_matches('\n').to_string(),
            )),
            _ => Ok(None),
        }
    }
}

/// Joins the side-band channel 1 (pack data) of pkt-lines that follow; channel 2 is
/// progress and ignored, channel 3 is a fatal error from the server.
pub(crate) fn demux_sideband(reader: &mut Reader<'_>) -> Result<Vec<u8>, String> {
    let mut pack = Vec::new();
    while let Some(pkt) = reader.next_pkt()? {
        match pkt {
            Pkt::Data([1, data @ ..]) => pack.extend_from_slice(data),
            Pkt::Data([2, ..]) => {}
            Pkt::Data([3, message @ ..]) => {
                return Err(format!(
                    "remote error: {}",
                    String::from_utf8_lossy(message).trim()
                ));
            }
            Pkt::Data(other) => {
                return Err(format!(
                    "unexpected side-band channel {}",
                    other.first().copied().unwrap_or(0)
                ));
            }
            Pkt::Flush | Pkt::ResponseEnd => break,
            Pkt::Delim => return Err("unexpected delimiter inside the packfile".into()),
        }
    }
    Ok(pack)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_length_including_the_header() {
        assert_eq!(line("command=ls-refs\n"), b"0014command=ls-refs\n");
    }

    #[test]
    fn reads_data_flush_and_delim() {
        let mut buf = line("version 2\n");
        buf.extend_from_slice(DELIM);
        buf.extend_from_slice(&line("x"));
        buf.extend_from_slice(FLUSH);
        let mut r = Reader::new(&buf);
        assert_eq!(r.next_text().unwrap().as_deref(), Some("version 2"));
        assert_eq!(r.next_pkt().unwrap(), Some(Pkt::Delim));
        assert_eq!(r.next_pkt().unwrap(), Some(Pkt::Data(b"x")));
        assert_eq!(r.next_pkt().unwrap(), Some(Pkt::Flush));
        assert_eq!(r.next_pkt().unwrap(), None);
    }

    #[test]
    fn refuses_truncated_and_malformed_lines() {
        assert_eq!(
            Reader::new(b"0009ab").next_pkt().unwrap_err(),
            "truncated pkt-line"
        );
        assert!(
            Reader::new(b"zz12")
                .next_pkt()
                .unwrap_err()
                .contains("invalid pkt-line length")
        );
        assert_eq!(
            Reader::new(b"0003").next_pkt().unwrap_err(),
            "invalid pkt-line length 3"
        );
    }

    #[test]
    fn sideband_keeps_channel_one_and_reports_channel_three() {
        let mut buf = Vec::new();
        for (band, data) in [(1u8, &b"PA"[..]), (2, b"progress"), (1, b"CK")] {
            let mut payload = vec![band];
            payload.extend_from_slice(data);
            buf.extend_from_slice(format!("{:04x}", payload.len() + 4).as_bytes());
            buf.extend_from_slice(&payload);
        }
        buf.extend_from_slice(FLUSH);
        assert_eq!(demux_sideband(&mut Reader::new(&buf)).unwrap(), b"PACK");
        let err = b"000b\x03denied";
        assert_eq!(
            demux_sideband(&mut Reader::new(err)).unwrap_err(),
            "remote error: denied"
        );
    }
}
