//! What a module image is, checked before the driver reads it.
//!
//! `cuModuleLoadDataEx` takes an image without its length: it reads a cubin
//! as far as its ELF headers say, a fatbin as far as its header says, and
//! PTX text up to its NUL. An image cut short would have the driver read
//! past the caller's slice, so the lengths the headers announce are checked
//! against the slice first.

/// The kinds of image the driver loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImageKind {
    /// A cubin: an ELF object for one GPU architecture.
    Cubin,
    /// A fatbin: cubins and PTX for several architectures.
    Fatbin,
    /// NUL-terminated PTX text.
    Ptx,
}

impl ImageKind {
    /// How a person calls it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ImageKind::Cubin => "cubin",
            ImageKind::Fatbin => "fatbin",
            ImageKind::Ptx => "PTX text",
        }
    }
}

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// `fatBinaryHeader::magic`, little-endian.
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// The magic of the wrapper a host compiler embeds around a fatbin
/// (`__fatBinC_Wrapper_t`), which points elsewhere and is not an image.
const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;
/// `SHT_NOBITS`: a section that occupies no bytes of the file.
const SHT_NOBITS: u32 = 8;

/// What `image` is, when every byte the driver would read lies inside it.
///
/// # Errors
///
/// A sentence saying what is wrong with the image.
pub(crate) fn classify(image: &[u8]) -> Result<ImageKind, String> {
    if image.is_empty() {
        return Err("the image is empty".into());
    }
    if image.starts_with(ELF_MAGIC) {
        return check_elf(image).map(|()| ImageKind::Cubin);
    }
    match read_u32(image, 0) {
        Some(FATBIN_MAGIC) => return check_fatbin(image).map(|()| ImageKind::Fatbin),
        Some(FATBIN_WRAPPER_MAGIC) => {
            return Err(
                "the image is a host-side fatbin wrapper, not a fatbin; pass the fatbin it \
                 points at"
                    .into(),
            );
        }
        _ => {}
    }
    if image.contains(&0) {
        Ok(ImageKind::Ptx)
    } else {
        Err(
            "the image is neither a cubin (ELF) nor a fatbin, and as PTX text it has no \
             terminating NUL"
                .into(),
        )
    }
}

fn check_fatbin(image: &[u8]) -> Result<(), String> {
    let header = read_u16(image, 6).ok_or("the fatbin header is cut short")?;
    let body = read_u64(image, 8).ok_or("the fatbin header is cut short")?;
    let end = u64::from(header)
        .checked_add(body)
        .ok_or("the fatbin header announces an impossible size")?;
    if end > image.len() as u64 {
        return Err(format!(
            "the fatbin header announces {end} bytes, the image holds {}",
            image.len()
        ));
    }
    Ok(())
}

fn check_elf(image: &[u8]) -> Result<(), String> {
    const SHORT: &str = "the ELF header is cut short";
    // EI_CLASS 2: 64-bit; EI_DATA 1: little-endian, as every cubin is.
    if image.get(4) != Some(&2) || image.get(5) != Some(&1) {
        return Err("the ELF image is not 64-bit little-endian, as a cubin is".into());
    }
    let phoff = read_u64(image, 0x20).ok_or(SHORT)?;
    let shoff = read_u64(image, 0x28).ok_or(SHORT)?;
    let phentsize = read_u16(image, 0x36).ok_or(SHORT)?;
    let phnum = read_u16(image, 0x38).ok_or(SHORT)?;
    let shentsize = read_u16(image, 0x3a).ok_or(SHORT)?;
    let shnum = read_u16(image, 0x3c).ok_or(SHORT)?;
    let len = image.len() as u64;
    let table = |what: &str, offset: u64, size: u16, count: u16| -> Result<(), String> {
        let end = u64::from(size)
            .checked_mul(u64::from(count))
            .and_then(|bytes| bytes.checked_add(offset));
        match end {
            Some(end) if end <= len => Ok(()),
            _ => Err(format!(
                "the ELF {what} table ({count} entries at {offset}) lies past the image's {len} bytes"
            )),
        }
    };
    table("program header", phoff, phentsize, phnum)?;
    table("section header", shoff, shentsize, shnum)?;
    if shnum > 0 && shentsize < 0x40 {
        return Err(format!(
            "the ELF section headers are {shentsize} bytes, not 64"
        ));
    }
    if phnum > 0 && phentsize < 0x38 {
        return Err(format!(
            "the ELF program headers are {phentsize} bytes, not 56"
        ));
    }
    for index in 0..u64::from(shnum) {
        let at = shoff + index * u64::from(shentsize);
        let kind = read_u32_at(image, at + 4).ok_or(SHORT)?;
        let offset = read_u64_at(image, at + 0x18).ok_or(SHORT)?;
        let size = read_u64_at(image, at + 0x20).ok_or(SHORT)?;
        if kind != SHT_NOBITS && offset.checked_add(size).is_none_or(|end| end > len) {
            return Err(format!(
                "ELF section {index} ({size} bytes at {offset}) lies past the image's {len} bytes"
            ));
        }
    }
    for index in 0..u64::from(phnum) {
        let at = phoff + index * u64::from(phentsize);
        let offset = read_u64_at(image, at + 0x08).ok_or(SHORT)?;
        let size = read_u64_at(image, at + 0x20).ok_or(SHORT)?;
        if offset.checked_add(size).is_none_or(|end| end > len) {
            return Err(format!(
                "ELF segment {index} ({size} bytes at {offset}) lies past the image's {len} bytes"
            ));
        }
    }
    Ok(())
}

fn bytes<const N: usize>(image: &[u8], at: u64) -> Option<[u8; N]> {
    let start = usize::try_from(at).ok()?;
    image.get(start..start.checked_add(N)?)?.try_into().ok()
}

fn read_u16(image: &[u8], at: usize) -> Option<u16> {
    bytes(image, at as u64).map(u16::from_le_bytes)
}

fn read_u32(image: &[u8], at: usize) -> Option<u32> {
    read_u32_at(image, at as u64)
}

fn read_u64(image: &[u8], at: usize) -> Option<u64> {
    read_u64_at(image, at as u64)
}

fn read_u32_at(image: &[u8], at: u64) -> Option<u32> {
    bytes(image, at).map(u32::from_le_bytes)
}

fn read_u64_at(image: &[u8], at: u64) -> Option<u64> {
    bytes(image, at).map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal 64-bit little-endian ELF: the header, then one section
    /// header describing `section` bytes at offset 0x80.
    fn elf(section_len: u64, file_len: usize) -> Vec<u8> {
        let mut image = vec![0u8; file_len.max(0x80)];
        image[..4].copy_from_slice(ELF_MAGIC);
        image[4] = 2;
        image[5] = 1;
        image[0x28..0x30].copy_from_slice(&0x40u64.to_le_bytes()); // shoff
        image[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes()); // shentsize
        image[0x3c..0x3e].copy_from_slice(&1u16.to_le_bytes()); // shnum
        image[0x44..0x48].copy_from_slice(&1u32.to_le_bytes()); // PROGBITS
        image[0x58..0x60].copy_from_slice(&0x80u64.to_le_bytes());
        image[0x60..0x68].copy_from_slice(&section_len.to_le_bytes());
        image.truncate(file_len);
        image
    }

    fn fatbin(body: u64, file_len: usize) -> Vec<u8> {
        let mut image = vec![0u8; file_len.max(16)];
        image[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        image[4..6].copy_from_slice(&1u16.to_le_bytes());
        image[6..8].copy_from_slice(&16u16.to_le_bytes());
        image[8..16].copy_from_slice(&body.to_le_bytes());
        image.truncate(file_len);
        image
    }

    #[test]
    fn whole_images_are_recognised() {
        assert_eq!(classify(&elf(16, 0x90)), Ok(ImageKind::Cubin));
        assert_eq!(classify(&fatbin(32, 48)), Ok(ImageKind::Fatbin));
        assert_eq!(classify(b".version 7.4\n\0"), Ok(ImageKind::Ptx));
    }

    #[test]
    fn images_cut_short_are_refused() {
        let cut = classify(&elf(16, 0x88)).unwrap_err();
        assert!(cut.contains("section 0"), "{cut}");
        let headers = classify(&elf(0, 0x60)).unwrap_err();
        assert!(headers.contains("section header table"), "{headers}");
        assert!(classify(&elf(0, 0x20)).is_err());
        let fat = classify(&fatbin(33, 48)).unwrap_err();
        assert!(fat.contains("announces 49 bytes"), "{fat}");
        assert!(classify(&fatbin(u64::MAX, 48)).is_err());
        assert!(classify(&fatbin(0, 12)).is_err());
        assert!(classify(b".version 7.4\n").unwrap_err().contains("NUL"));
        assert!(classify(b"").is_err());
        let mut wrapper = vec![0u8; 24];
        wrapper[..4].copy_from_slice(&FATBIN_WRAPPER_MAGIC.to_le_bytes());
        assert!(classify(&wrapper).unwrap_err().contains("wrapper"));
        let mut big_endian = elf(16, 0x90);
        big_endian[5] = 2;
        assert!(classify(&big_endian).is_err());
    }
}
