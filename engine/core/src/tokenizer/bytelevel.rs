//! GPT-2's reversible map between bytes and printable characters, which
//! byte-level BPE vocabularies are written in (`Ġ` is the space byte).

use std::sync::OnceLock;

/// The character each byte is written as in a byte-level BPE vocabulary (GPT-2's
/// `bytes_to_unicode`), in byte order.
pub fn bytes_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        map[b as usize] = char::from_u32(c).unwrap_or('\u{FFFD}');
    }
    map
}

/// The bytes a byte-level token stands for; characters outside the map are
/// kept as their UTF-8.
pub(crate) fn byte_level_decode(token: &str) -> Vec<u8> {
    static REVERSE: OnceLock<std::collections::HashMap<char, u8>> = OnceLock::new();
    let rev = REVERSE.get_or_init(|| {
        bytes_to_unicode()
            .iter()
            .enumerate()
            .map(|(b, c)| (*c, b as u8))
            .collect()
    });
    let mut out = Vec::with_capacity(token.len());
    for c in token.chars() {
        match rev.get(&c) {
            Some(b) => out.push(*b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_every_byte() {
        let map = bytes_to_unicode();
        for b in 0..=255u8 {
            assert_eq!(byte_level_decode(&map[b as usize].to_string()), vec![b]);
        }
        assert_eq!(byte_level_decode("Ġhello"), b" hello");
    }
}
