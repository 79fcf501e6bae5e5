//! What `hipModuleLoadData` would read of a code object, checked against
//! the slice it is in before the runtime sees it.
//!
//! The runtime takes a pointer and no length: it sizes the image from its
//! own headers, an ELF's header tables and sections or an offload bundle's
//! entry table. So every byte those headers send it to must lie in the
//! slice, or a truncated or forged image is read out of bounds.

/// The magic an uncompressed clang offload bundle starts with.
const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// The magic a compressed offload bundle starts with.
const COMPRESSED_MAGIC: &[u8] = b"CCOB";
const ELF_MAGIC: &[u8] = b"\x7fELF";
/// Bytes of an ELF64 header.
const ELF64_HEADER: u64 = 64;
/// `ELFCLASS64`, `ELFDATA2LSB`: AMD GPU code objects are 64-bit little-endian.
const ELF_CLASS_64: u8 = 2;
const ELF_LITTLE_ENDIAN: u8 = 1;
/// Section type with no bytes in the file.
const SHT_NOBITS: u32 = 8;
/// Bytes of one program header and one section header of an ELF64.
const PROGRAM_HEADER: u64 = 56;
const SECTION_HEADER: u64 = 64;

/// What kind of code object `image` is (`"ELF"` or `"offload bundle"`) when
/// every byte its headers name lies in the slice, else why not.
pub(crate) fn check(image: &[u8]) -> Result<&'static str, String> {
    if image.starts_with(ELF_MAGIC) {
        elf(image).map(|()| "ELF")
    } else if image.starts_with(BUNDLE_MAGIC) {
        bundle(image).map(|()| "offload bundle")
    } else if image.starts_with(COMPRESSED_MAGIC) {
        Err(
            "a compressed offload bundle (CCOB) is not accepted, since its compressed size \
             cannot be checked against the slice on every version; pass the uncompressed \
             bundle or the ELF code object (clang-offload-bundler --unbundle)"
                .to_owned(),
        )
    } else {
        Err(format!(
            "the image is neither an ELF code object nor a clang offload bundle (it starts \
             with {:02x?})",
            &image[..image.len().min(8)]
        ))
    }
}

fn u16_at(bytes: &[u8], at: u64) -> Option<u16> {
    let at = usize::try_from(at).ok()?;
    let raw = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes(raw.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: u64) -> Option<u32> {
    let at = usize::try_from(at).ok()?;
    let raw = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(raw.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    let raw = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(raw.try_into().ok()?))
}

/// `offset..offset + len` lies within `total` bytes, without overflowing.
fn within(offset: u64, len: u64, total: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= total)
}

/// An ELF64 code object: its header, both header tables and every section
/// and segment with bytes in the file lie in the slice.
fn elf(image: &[u8]) -> Result<(), String> {
    let total = image.len() as u64;
    let truncated = |what: &str| {
        Err(format!(
            "the ELF code object is truncated: its {what} lies past the end of the {total} \
             bytes given"
        ))
    };
    if total < ELF64_HEADER {
        return truncated("64-byte header");
    }
    if image.get(4) != Some(&ELF_CLASS_64) || image.get(5) != Some(&ELF_LITTLE_ENDIAN) {
        return Err(
            "the ELF image is not 64-bit little-endian, as AMD GPU code objects are".to_owned(),
        );
    }
    let header = |at: u64| u64_at(image, at).unwrap_or(u64::MAX);
    let half = |at: u64| u64::from(u16_at(image, at).unwrap_or(u16::MAX));
    let (phoff, shoff) = (header(32), header(40));
    let (phentsize, phnum) = (half(54), half(56));
    let (shentsize, shnum) = (half(58), half(60));
    if phnum > 0 {
        if phentsize < PROGRAM_HEADER {
            return Err(format!(
                "the ELF program headers are {phentsize} bytes, not 56"
            ));
        }
        if !within(phoff, phentsize * phnum, total) {
            return truncated("program header table");
        }
        for index in 0..phnum {
            let at = phoff + index * phentsize;
            let (offset, size) = (header(at + 8), header(at + 32));
            if !within(offset, size, total) {
                return truncated(&format!("segment {index}"));
            }
        }
    }
    if shnum > 0 {
        if shentsize < SECTION_HEADER {
            return Err(format!(
                "the ELF section headers are {shentsize} bytes, not 64"
            ));
        }
        if !within(shoff, shentsize * shnum, total) {
            return truncated("section header table");
        }
        for index in 0..shnum {
            let at = shoff + index * shentsize;
            let kind = u32_at(image, at + 4).unwrap_or(0);
            let (offset, size) = (header(at + 24), header(at + 32));
            if kind != SHT_NOBITS && !within(offset, size, total) {
                return truncated(&format!("section {index}"));
            }
        }
    }
    Ok(())
}

/// An uncompressed clang offload bundle: its entry table and every entry
/// lie in the slice, and an entry holding an ELF passes [`elf`] within its
/// own bounds.
fn bundle(image: &[u8]) -> Result<(), String> {
    let total = image.len() as u64;
    let truncated = |what: String| {
        Err(format!(
            "the offload bundle is truncated: {what} lies past the end of the {total} bytes given"
        ))
    };
    let mut at = BUNDLE_MAGIC.len() as u64;
    let Some(count) = u64_at(image, at) else {
        return truncated("its entry count".to_owned());
    };
    at += 8;
    for index in 0..count {
        let (Some(offset), Some(size), Some(triple)) = (
            u64_at(image, at),
            u64_at(image, at + 8),
            u64_at(image, at + 16),
        ) else {
            return truncated(format!("the table entry of entry {index}"));
        };
        at += 24;
        if !within(at, triple, total) {
            return truncated(format!("the target name of entry {index}"));
        }
        at += triple;
        if !within(offset, size, total) {
            return truncated(format!("entry {index} ({size} bytes at offset {offset})"));
        }
        // Both fit the slice's length, so they fit usize.
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = usize::try_from(offset + size).unwrap_or(usize::MAX);
        if let Some(entry) = image.get(start..end)
            && entry.starts_with(ELF_MAGIC)
        {
            elf(entry).map_err(|why| format!("entry {index} of the offload bundle: {why}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-byte ELF64 header with one section of `size` bytes at `offset`,
    /// its section header right after the header.
    fn elf_with_section(offset: u64, size: u64) -> Vec<u8> {
        let mut image = vec![0u8; 128];
        image[..4].copy_from_slice(ELF_MAGIC);
        image[4] = ELF_CLASS_64;
        image[5] = ELF_LITTLE_ENDIAN;
        image[40..48].copy_from_slice(&64u64.to_le_bytes());
        image[58..60].copy_from_slice(&64u16.to_le_bytes());
        image[60..62].copy_from_slice(&1u16.to_le_bytes());
        image[64 + 4..64 + 8].copy_from_slice(&1u32.to_le_bytes());
        image[64 + 24..64 + 32].copy_from_slice(&offset.to_le_bytes());
        image[64 + 32..64 + 40].copy_from_slice(&size.to_le_bytes());
        image
    }

    fn bundle_of(entry: &[u8], claimed: u64) -> Vec<u8> {
        let triple = b"hipv4-amdgcn-amd-amdhsa--gfx90a";
        let mut image = BUNDLE_MAGIC.to_vec();
        image.extend_from_slice(&1u64.to_le_bytes());
        let offset = (image.len() + 24 + triple.len()) as u64;
        image.extend_from_slice(&offset.to_le_bytes());
        image.extend_from_slice(&claimed.to_le_bytes());
        image.extend_from_slice(&(triple.len() as u64).to_le_bytes());
        image.extend_from_slice(triple);
        image.extend_from_slice(entry);
        image
    }

    #[test]
    fn whole_images_pass() {
        let elf = elf_with_section(0, 128);
        assert_eq!(check(&elf), Ok("ELF"));
        assert_eq!(check(&bundle_of(&elf, 128)), Ok("offload bundle"));
    }

    #[test]
    fn truncated_and_overreaching_images_are_refused() {
        let elf = elf_with_section(0, 128);
        let short = check(&elf[..100]).unwrap_err();
        assert!(short.contains("section header table"), "{short}");
        let section = check(&elf_with_section(100, 64)).unwrap_err();
        assert!(section.contains("section 0"), "{section}");
        assert!(check(&elf[..40]).unwrap_err().contains("64-byte header"));
        let bundle = bundle_of(&elf, 128);
        let cut = check(&bundle[..bundle.len() - 1]).unwrap_err();
        assert!(cut.contains("entry 0"), "{cut}");
        let past = check(&bundle_of(&elf, 4096)).unwrap_err();
        assert!(past.contains("4096 bytes at offset"), "{past}");
        let inner = check(&bundle_of(&elf_with_section(100, 64), 128)).unwrap_err();
        assert!(inner.contains("entry 0 of the offload bundle"), "{inner}");
        assert!(check(&bundle[..30]).unwrap_err().contains("entry count"));
        assert!(check(b"CCOB\x02\x00").unwrap_err().contains("compressed"));
        assert!(check(b"FAKE").unwrap_err().contains("neither"));
    }
}
