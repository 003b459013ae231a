//! The flow-depth pre-scan: refuses a file whose `[`/`{` nest too deep before the YAML scanner,
//! whose time grows with the square of that depth, ever sees it.

use super::BuildError;

/// How deep `[`/`{` may nest. The YAML scanner takes time quadratic in this depth (a 400 KB
/// file of brackets ran for minutes) and the deserializer refuses anything past 128 levels
/// anyway; inside a flow collection, brackets inside strings count too, which no real manifest
/// piles up this high.
const MAX_FLOW_DEPTH: usize = 1000;

/// Refuses `text` before parsing when its flow collections nest deeper than [`MAX_FLOW_DEPTH`].
/// Outside a flow collection a bracket opens one only where a node can start: at a line's
/// start, after `: `, `- `, `? ` or `---`, or after an anchor or tag there. Anywhere else it is
/// part of a plain or quoted scalar, a comment or a block scalar, which the scanner reads in
/// linear time however many brackets it holds, and which never closes, so counting it would
/// add up across the file (a thousand `k: a [b` values refused, where kustomize reads them).
/// A line indented past the node holding a plain scalar that ended the line before continues
/// that scalar (printers fold long keys and values so), so no node starts there. When unsure
/// the scan counts: a continuation line of a multi-line quoted scalar starts a node here.
pub(super) fn refuse_deep_flow(text: &str, origin: &str) -> Result<(), BuildError> {
    let mut scan = Scan::default();
    for (n, line) in text.lines().enumerate() {
        if scan.line(line.as_bytes()).is_err() {
            return Err(BuildError::Yaml {
                file: origin.to_string(),
                line: n + 1,
                message: format!("flow collections nested deeper than {MAX_FLOW_DEPTH} levels"),
            });
        }
    }
    Ok(())
}

/// What the scan carries from one line to the next.
#[derive(Default)]
struct Scan {
    depth: usize,
    block: Option<BlockScalar>,
    /// Column of the node holding a plain scalar that ended the last line: a line indented
    /// further continues it.
    plain: Option<isize>,
}

/// A block scalar (`|`, `>`) whose content lines are being skipped.
struct BlockScalar {
    /// Column of the node holding it: content lines are indented further.
    parent: isize,
    /// Indentation of its content, once its first line (or an explicit indicator) tells.
    indent: Option<usize>,
}

struct TooDeep;

fn blank(b: Option<&u8>) -> bool {
    matches!(b, None | Some(b' ' | b'\t'))
}

impl Scan {
    fn open(&mut self) -> Result<(), TooDeep> {
        self.depth += 1;
        if self.depth > MAX_FLOW_DEPTH {
            return Err(TooDeep);
        }
        Ok(())
    }

    fn line(&mut self, line: &[u8]) -> Result<(), TooDeep> {
        let spaces = line.iter().take_while(|&&b| b == b' ').count();
        let marker = (line.starts_with(b"---") || line.starts_with(b"...")) && blank(line.get(3));
        if let Some(block) = &mut self.block
            && !marker
        {
            if line.iter().all(|&b| b == b' ' || b == b'\t') {
                return Ok(());
            }
            match block.indent {
                Some(indent) if spaces >= indent => return Ok(()),
                None if spaces as isize > block.parent => {
                    block.indent = Some(spaces);
                    return Ok(());
                }
                _ => {}
            }
        }
        self.block = None;
        if self.depth == 0 && line.iter().all(|&b| b == b' ' || b == b'\t') {
            return Ok(());
        }
        let continued = self
            .plain
            .filter(|&p| self.depth == 0 && !marker && spaces as isize > p);
        self.plain = None;
        // Outside a flow collection: whether a node can start here, the column a block scalar
        // starting here would be indented from, where the last node on this line began, and
        // the column of the node holding a plain scalar still open.
        let mut node_start = continued.is_none();
        let mut plain = continued;
        let mut parent = spaces as isize - 1;
        let mut node_col = spaces;
        let mut i = 0;
        if marker && self.depth == 0 {
            parent = -1;
            i = 3;
        }
        while let Some(&b) = line.get(i) {
            if self.depth > 0 {
                match b {
                    b'[' | b'{' => self.open()?,
                    b']' | b'}' => self.depth -= 1,
                    _ => {}
                }
                i += 1;
                continue;
            }
            if blank(Some(&b)) {
                i += 1;
                continue;
            }
            let at_start = std::mem::replace(&mut node_start, false);
            if at_start {
                node_col = i;
            }
            let next_blank = blank(line.get(i + 1));
            match b {
                b'#' if i == 0 || blank(line.get(i - 1)) => return Ok(()),
                b':' if next_blank => {
                    node_start = true;
                    parent = node_col as isize;
                    plain = None;
                }
                b'-' | b'?' if at_start && next_blank => {
                    node_start = true;
                    parent = i as isize;
                }
                b'&' | b'!' if at_start => {
                    while !blank(line.get(i)) {
                        i += 1;
                    }
                    node_start = true;
                }
                b'[' | b'{' if at_start => self.open()?,
                b'"' | b'\'' if at_start => i = quoted_end(line, i),
                b'|' | b'>' if at_start => {
                    self.block = block_header(&line[i + 1..], parent);
                    if self.block.is_some() {
                        return Ok(());
                    }
                }
                _ if at_start => plain = Some(parent),
                _ => {}
            }
            i += 1;
        }
        if self.depth == 0 {
            self.plain = plain;
        }
        Ok(())
    }
}

/// Index of the quote closing the quoted scalar opened at `open`, or the line's end: a quoted
/// scalar going on to the next line ends here, and the next line is scanned as any other.
fn quoted_end(line: &[u8], open: usize) -> usize {
    let quote = line[open];
    let mut i = open + 1;
    while let Some(&b) = line.get(i) {
        match b {
            b'\\' if quote == b'"' => i += 1,
            b'\'' if quote == b'\'' && line.get(i + 1) == Some(&b'\'') => i += 1,
            _ if b == quote => return i,
            _ => {}
        }
        i += 1;
    }
    i
}

/// The block scalar a `|` or `>` followed by `rest` starts, if `rest` is a valid header
/// (indentation and chomping indicators, then nothing but a comment).
fn block_header(rest: &[u8], parent: isize) -> Option<BlockScalar> {
    let end = rest
        .iter()
        .position(|&b| !matches!(b, b'0'..=b'9' | b'+' | b'-'))
        .unwrap_or(rest.len());
    let (indicators, after) = rest.split_at(end);
    let tail = after.iter().position(|&b| !blank(Some(&b)));
    if tail.is_some_and(|t| after[t] != b'#') {
        return None;
    }
    let explicit = indicators.iter().find(|b| b.is_ascii_digit());
    Some(BlockScalar {
        parent,
        indent: explicit.map(|d| parent.max(0) as usize + usize::from(d - b'0')),
    })
}

#[cfg(test)]
mod tests;
