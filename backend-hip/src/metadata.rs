//! What a code object says about its kernels' interfaces, so that a kernel is
//! checked against its signature when it is built rather than trusted.
//!
//! An AMDGPU code object (v3 and later, which every supported ROCm emits) is
//! an ELF file whose `NT_AMDGPU_METADATA` note holds a MessagePack map: under
//! `amdhsa.kernels`, each kernel's symbol, its arguments (kind and size, in
//! order) and its launch bounds. That is enough to see that a kernel takes
//! one pointer per binding, a pointer for the info block, then by-value
//! parameters of the declared sizes, and that its workgroup fits the bounds
//! it was compiled for. A clang offload bundle (what `hipcc --genco` writes)
//! is opened and each AMDGPU object in it read.
//!
//! The image comes from the caller and is only read: every access is bounds
//! checked, so a malformed file is "no metadata", never a panic. Anything this
//! reader does not understand (code object v2's YAML, a compressed bundle)
//! leaves the kernel unchecked, as the caller's `unsafe` promise covers.

use std::fmt;

use capture_core::Signature;

/// `ELFCLASS64`.
const ELF_CLASS_64: u8 = 2;
/// `ELFDATA2LSB`.
const ELF_DATA_LE: u8 = 1;
/// `EM_AMDGPU`.
const EM_AMDGPU: u16 = 224;
/// `SHT_NOTE`.
const SHT_NOTE: u32 = 7;
/// `PT_NOTE`.
const PT_NOTE: u32 = 4;
/// `NT_AMDGPU_METADATA`, in notes named `AMDGPU`.
const NT_AMDGPU_METADATA: u32 = 32;
/// The first bytes of a clang offload bundle.
const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// Deepest MessagePack nesting read; real metadata nests four deep.
const MAX_DEPTH: usize = 16;

/// One explicit argument of a kernel, as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Arg {
    /// A pointer to global memory (`global_buffer`, 8 bytes).
    Pointer,
    /// A value passed by value, of this many bytes (`by_value`).
    Value(u64),
    /// Anything else (an image, a sampler, a pointer of another size).
    Other(String, u64),
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Pointer => write!(f, "pointer"),
            Arg::Value(size) => write!(f, "{size}-byte value"),
            Arg::Other(kind, size) => write!(f, "{kind} ({size} bytes)"),
        }
    }
}

/// One kernel's interface, from the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelInterface {
    /// `.name`: the kernel's name in the source.
    pub name: String,
    /// `.symbol`: its descriptor's symbol (`<entry>.kd`).
    pub symbol: String,
    /// Its explicit arguments in order; the runtime's hidden ones (grid
    /// sizes, offsets) are left out, as a launch does not pass them.
    pub args: Vec<Arg>,
    /// `.max_flat_workgroup_size`: the most threads a workgroup may have
    /// (`__launch_bounds__`, else the compiler's default).
    pub max_threads: Option<u64>,
    /// `.reqd_workgroup_size`, where the source demands one.
    pub required_workgroup: Option<[u64; 3]>,
}

impl KernelInterface {
    /// Whether this is the kernel `hipModuleGetFunction(entry)` finds.
    fn is(&self, entry: &str) -> bool {
        self.symbol.strip_suffix(".kd") == Some(entry)
            || (self.symbol.is_empty() && self.name == entry)
    }

    /// Why this kernel cannot be launched as `signature` says, if it cannot.
    fn disagreement(&self, signature: &Signature) -> Option<String> {
        let expected = expected_args(signature);
        if self.args != expected {
            return Some(format!(
                "the code object's {} takes ({}), but its signature {signature} declares ({}): \
                 one pointer per binding, {}then the by-value parameters",
                self.name,
                list(&self.args),
                list(&expected),
                if signature.info_bytes() > 0 {
                    "a pointer to the info bytes, "
                } else {
                    ""
                },
            ));
        }
        let [x, y, z] = signature.workgroup_size();
        if let Some(max) = self.max_threads
            && signature.threads() > max
        {
            return Some(format!(
                "the code object's {} allows at most {max} threads per workgroup (its launch \
                 bounds), but its signature declares a workgroup of {x}x{y}x{z}",
                self.name
            ));
        }
        if let Some(required) = self.required_workgroup
            && required != [u64::from(x), u64::from(y), u64::from(z)]
        {
            let [rx, ry, rz] = required;
            return Some(format!(
                "the code object's {} requires a workgroup of {rx}x{ry}x{rz}, but its signature \
                 declares {x}x{y}x{z}",
                self.name
            ));
        }
        None
    }
}

/// The arguments a kernel built for `signature` takes, in the backend's
/// convention.
fn expected_args(signature: &Signature) -> Vec<Arg> {
    let pointers = signature.accesses().len() + usize::from(signature.info_bytes() > 0);
    let mut args = vec![Arg::Pointer; pointers];
    args.extend(
        signature
            .param_sizes()
            .iter()
            .map(|&size| Arg::Value(u64::from(size))),
    );
    args
}

fn list(args: &[Arg]) -> String {
    if args.is_empty() {
        return "nothing".to_owned();
    }
    args.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The interfaces of every kernel the image's metadata describes, from every
/// AMDGPU object in it; `None` when it holds no metadata this reader
/// understands.
pub(crate) fn read(image: &[u8]) -> Option<Vec<KernelInterface>> {
    let mut found = None;
    for object in objects(image) {
        if let Some(kernels) = elf_metadata(object).and_then(kernels) {
            found.get_or_insert_with(Vec::new).extend(kernels);
        }
    }
    found
}

/// Check `entry` in `interfaces` (what [`read`] found) against `signature`:
/// `Err` with the reason when it disagrees, or when the metadata was read
/// and names no such kernel.
pub(crate) fn check(
    interfaces: &[KernelInterface],
    entry: &str,
    signature: &Signature,
) -> Result<(), String> {
    let mut matched = false;
    for kernel in interfaces.iter().filter(|kernel| kernel.is(entry)) {
        matched = true;
        if let Some(reason) = kernel.disagreement(signature) {
            return Err(reason);
        }
    }
    if matched {
        return Ok(());
    }
    let mut names: Vec<&str> = interfaces.iter().map(|k| k.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    Err(format!(
        "the code object has no kernel {entry:?}; it has {}",
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    ))
}

/// The AMDGPU ELF objects in `image`: itself, or each one in its bundle.
fn objects(image: &[u8]) -> Vec<&[u8]> {
    if image.starts_with(b"\x7fELF") {
        return vec![image];
    }
    if !image.starts_with(BUNDLE_MAGIC) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut at = BUNDLE_MAGIC.len();
    let Some(count) = le_u64(image, at) else {
        return out;
    };
    at += 8;
    for _ in 0..count {
        let (Some(offset), Some(size), Some(id_len)) = (
            le_u64(image, at),
            le_u64(image, at + 8),
            le_u64(image, at + 16),
        ) else {
            break;
        };
        at += 24;
        let Some(id) = range(image, at as u64, id_len) else {
            break;
        };
        at += id.len();
        let is_amdgcn = id.windows(6).any(|w| w == b"amdgcn");
        if let Some(object) = range(image, offset, size)
            && is_amdgcn
            && object.starts_with(b"\x7fELF")
        {
            out.push(object);
        }
    }
    out
}

/// The descriptor of the `NT_AMDGPU_METADATA` note of an AMDGPU ELF object,
/// found through its section headers, else its program headers.
fn elf_metadata(elf: &[u8]) -> Option<&[u8]> {
    if elf.get(4) != Some(&ELF_CLASS_64) || elf.get(5) != Some(&ELF_DATA_LE) {
        return None;
    }
    if le_u16(elf, 18)? != EM_AMDGPU {
        return None;
    }
    let sections = headers(
        elf,
        le_u64(elf, 0x28)?,
        le_u16(elf, 0x3a)?,
        le_u16(elf, 0x3c)?,
    );
    for header in sections {
        if le_u32(header, 4) == Some(SHT_NOTE)
            && let Some(found) =
                range(elf, le_u64(header, 0x18)?, le_u64(header, 0x20)?).and_then(metadata_note)
        {
            return Some(found);
        }
    }
    let segments = headers(
        elf,
        le_u64(elf, 0x20)?,
        le_u16(elf, 0x36)?,
        le_u16(elf, 0x38)?,
    );
    for header in segments {
        if le_u32(header, 0) == Some(PT_NOTE)
            && let Some(found) =
                range(elf, le_u64(header, 8)?, le_u64(header, 0x20)?).and_then(metadata_note)
        {
            return Some(found);
        }
    }
    None
}

/// The `count` headers of `size` bytes at `offset`, those that lie in `elf`.
fn headers(elf: &[u8], offset: u64, size: u16, count: u16) -> impl Iterator<Item = &[u8]> {
    (0..u64::from(count)).filter_map(move |i| {
        let at = offset.checked_add(i.checked_mul(u64::from(size))?)?;
        range(elf, at, u64::from(size))
    })
}

/// The metadata note's descriptor among the notes in `notes`.
fn metadata_note(notes: &[u8]) -> Option<&[u8]> {
    let mut at = 0usize;
    while at < notes.len() {
        let name_len = le_u32(notes, at)? as usize;
        let desc_len = le_u32(notes, at + 4)? as usize;
        let kind = le_u32(notes, at + 8)?;
        let name_at = at + 12;
        let desc_at = name_at.checked_add(name_len.checked_next_multiple_of(4)?)?;
        let name = notes.get(name_at..name_at.checked_add(name_len)?)?;
        let desc = notes.get(desc_at..desc_at.checked_add(desc_len)?)?;
        if kind == NT_AMDGPU_METADATA && name.strip_suffix(b"\0").unwrap_or(name) == b"AMDGPU" {
            return Some(desc);
        }
        at = desc_at.checked_add(desc_len.checked_next_multiple_of(4)?)?;
    }
    None
}

/// The kernels listed under `amdhsa.kernels` in the MessagePack `bytes`.
fn kernels(bytes: &[u8]) -> Option<Vec<KernelInterface>> {
    let mut reader = Reader { bytes, at: 0 };
    let root = reader.value(0)?;
    let Value::Array(list) = root.get("amdhsa.kernels")? else {
        return None;
    };
    list.iter().map(kernel).collect()
}

fn kernel(value: &Value<'_>) -> Option<KernelInterface> {
    let text = |key| match value.get(key) {
        Some(Value::Str(text)) => Some((*text).to_owned()),
        _ => None,
    };
    let name = text(".name")?;
    let symbol = text(".symbol").unwrap_or_default();
    let args = match value.get(".args") {
        Some(Value::Array(args)) => args.iter().filter_map(arg).collect::<Option<Vec<_>>>()?,
        None => Vec::new(),
        Some(_) => return None,
    };
    let max_threads = value.get(".max_flat_workgroup_size").and_then(Value::uint);
    let required_workgroup = match value.get(".reqd_workgroup_size") {
        Some(Value::Array(dims)) if dims.len() == 3 => {
            Some([dims[0].uint()?, dims[1].uint()?, dims[2].uint()?])
        }
        _ => None,
    };
    Some(KernelInterface {
        name,
        symbol,
        args,
        max_threads,
        required_workgroup,
    })
}

/// One argument: `None` for a hidden one (left out), `Some(None)` for one
/// that cannot be read (the whole kernel is then unreadable).
fn arg(value: &Value<'_>) -> Option<Option<Arg>> {
    let Some(Value::Str(kind)) = value.get(".value_kind") else {
        return Some(None);
    };
    if kind.starts_with("hidden_") {
        return None;
    }
    let Some(size) = value.get(".size").and_then(Value::uint) else {
        return Some(None);
    };
    Some(Some(match *kind {
        "global_buffer" if size == 8 => Arg::Pointer,
        "by_value" => Arg::Value(size),
        other => Arg::Other(other.to_owned(), size),
    }))
}

/// The MessagePack values the metadata uses.
#[derive(Debug, PartialEq)]
enum Value<'a> {
    Nil,
    Bool(bool),
    Uint(u64),
    Int(i64),
    Float,
    Str(&'a str),
    Bytes,
    Array(Vec<Value<'a>>),
    Map(Vec<(Value<'a>, Value<'a>)>),
}

impl Value<'_> {
    /// The value under string key `key` of a map.
    fn get(&self, key: &str) -> Option<&Self> {
        let Value::Map(entries) = self else {
            return None;
        };
        entries
            .iter()
            .find(|(k, _)| matches!(k, Value::Str(k) if *k == key))
            .map(|(_, v)| v)
    }

    fn uint(&self) -> Option<u64> {
        match *self {
            Value::Uint(v) => Some(v),
            Value::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
}

/// A MessagePack decoder over borrowed bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }

    fn be(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)),
        )
    }

    /// A length field of `n` bytes, refused when it promises more items than
    /// bytes remain (each item takes at least one), so no allocation is
    /// sized by a corrupt count.
    fn count(&mut self, n: usize) -> Option<usize> {
        let count = usize::try_from(self.be(n)?).ok()?;
        (count <= self.bytes.len() - self.at).then_some(count)
    }

    fn value(&mut self, depth: usize) -> Option<Value<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let tag = *self.take(1)?.first()?;
        Some(match tag {
            0x00..=0x7f => Value::Uint(u64::from(tag)),
            0x80..=0x8f => self.map(usize::from(tag & 0x0f), depth)?,
            0x90..=0x9f => self.array(usize::from(tag & 0x0f), depth)?,
            0xa0..=0xbf => self.text(usize::from(tag & 0x1f))?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let len = self.count(1 << (tag - 0xc4))?;
                self.take(len)?;
                Value::Bytes
            }
            0xc7..=0xc9 => {
                let len = self.count(1 << (tag - 0xc7))?;
                self.take(len.checked_add(1)?)?;
                Value::Bytes
            }
            0xca => {
                self.take(4)?;
                Value::Float
            }
            0xcb => {
                self.take(8)?;
                Value::Float
            }
            0xcc..=0xcf => Value::Uint(self.be(1 << (tag - 0xcc))?),
            0xd0..=0xd3 => {
                let width = 1usize << (tag - 0xd0);
                let raw = self.be(width)?;
                let shift = 64 - 8 * width as u32;
                // Sign-extend the big-endian two's complement value.
                Value::Int(((raw << shift) as i64) >> shift)
            }
            0xd4..=0xd8 => {
                self.take((1usize << (tag - 0xd4)) + 1)?;
                Value::Bytes
            }
            0xd9..=0xdb => {
                let len = self.count(1 << (tag - 0xd9))?;
                self.text(len)?
            }
            0xdc | 0xdd => {
                let len = self.count(2 << (tag - 0xdc))?;
                self.array(len, depth)?
            }
            0xde | 0xdf => {
                let len = self.count(2 << (tag - 0xde))?;
                self.map(len, depth)?
            }
            0xe0..=0xff => Value::Int(i64::from(tag as i8)),
            0xc1 => return None,
        })
    }

    fn text(&mut self, len: usize) -> Option<Value<'a>> {
        std::str::from_utf8(self.take(len)?).ok().map(Value::Str)
    }

    fn array(&mut self, len: usize, depth: usize) -> Option<Value<'a>> {
        let mut items = Vec::new();
        for _ in 0..len {
            items.push(self.value(depth + 1)?);
        }
        Some(Value::Array(items))
    }

    fn map(&mut self, len: usize, depth: usize) -> Option<Value<'a>> {
        let mut entries = Vec::new();
        for _ in 0..len {
            let key = self.value(depth + 1)?;
            let value = self.value(depth + 1)?;
            entries.push((key, value));
        }
        Some(Value::Map(entries))
    }
}

fn range(bytes: &[u8], offset: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    bytes.get(start..end)
}

fn le_u16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use capture_core::Access;

    /// MessagePack writers for hand-made metadata.
    pub(crate) fn str(out: &mut Vec<u8>, text: &str) {
        assert!(text.len() < 32);
        out.push(0xa0 | text.len() as u8);
        out.extend_from_slice(text.as_bytes());
    }

    pub(crate) fn uint(out: &mut Vec<u8>, value: u64) {
        out.push(0xcf);
        out.extend_from_slice(&value.to_be_bytes());
    }

    /// The metadata of one kernel `name` with `args` as (value kind, size).
    pub(crate) fn metadata(name: &str, args: &[(&str, u64)], max_threads: u64) -> Vec<u8> {
        let mut out = vec![0x81];
        str(&mut out, "amdhsa.kernels");
        out.push(0x91);
        out.push(0x84);
        str(&mut out, ".name");
        str(&mut out, name);
        str(&mut out, ".symbol");
        str(&mut out, &format!("{name}.kd"));
        str(&mut out, ".max_flat_workgroup_size");
        uint(&mut out, max_threads);
        str(&mut out, ".args");
        out.push(0xdc);
        out.extend_from_slice(&(args.len() as u16).to_be_bytes());
        for (kind, size) in args {
            out.push(0x82);
            str(&mut out, ".value_kind");
            str(&mut out, kind);
            str(&mut out, ".size");
            out.push(*size as u8);
        }
        out
    }

    /// A minimal AMDGPU ELF holding `desc` as its metadata note, found
    /// through one section header.
    pub(crate) fn elf(desc: &[u8]) -> Vec<u8> {
        let mut note = Vec::new();
        note.extend_from_slice(&7u32.to_le_bytes());
        note.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        note.extend_from_slice(&NT_AMDGPU_METADATA.to_le_bytes());
        note.extend_from_slice(b"AMDGPU\0\0");
        note.extend_from_slice(desc);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = ELF_CLASS_64;
        elf[5] = ELF_DATA_LE;
        elf[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        let note_at = elf.len() as u64;
        elf.extend_from_slice(&note);
        let section_at = elf.len() as u64;
        let mut section = vec![0u8; 64];
        section[4..8].copy_from_slice(&SHT_NOTE.to_le_bytes());
        section[0x18..0x20].copy_from_slice(&note_at.to_le_bytes());
        section[0x20..0x28].copy_from_slice(&(note.len() as u64).to_le_bytes());
        elf.extend_from_slice(&section);
        elf[0x28..0x30].copy_from_slice(&section_at.to_le_bytes());
        elf[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3c..0x3e].copy_from_slice(&1u16.to_le_bytes());
        elf
    }

    fn scale() -> Signature {
        Signature::new("scale")
            .binding(Access::ReadWrite)
            .param(4)
            .param(4)
    }

    #[test]
    fn reads_a_kernel_and_checks_it() {
        let meta = metadata(
            "scale",
            &[
                ("global_buffer", 8),
                ("by_value", 4),
                ("by_value", 4),
                ("hidden_block_count_x", 4),
            ],
            64,
        );
        let found = read(&elf(&meta)).expect("metadata");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "scale");
        assert_eq!(found[0].args, [Arg::Pointer, Arg::Value(4), Arg::Value(4)]);
        assert_eq!(found[0].max_threads, Some(64));
        assert_eq!(check(&found, "scale", &scale()), Ok(()));

        let fewer = Signature::new("scale").binding(Access::ReadWrite).param(4);
        let reason = check(&found, "scale", &fewer).unwrap_err();
        assert!(
            reason.contains("takes (pointer, 4-byte value, 4-byte value)")
                && reason.contains("declares (pointer, 4-byte value)"),
            "{reason}"
        );
        let info = scale().info(16);
        assert!(
            check(&found, "scale", &info)
                .unwrap_err()
                .contains("info bytes")
        );
        let wide = scale().workgroup([128, 1, 1]);
        let reason = check(&found, "scale", &wide).unwrap_err();
        assert!(reason.contains("at most 64 threads"), "{reason}");
        let missing = check(&found, "other", &scale()).unwrap_err();
        assert!(
            missing.contains("no kernel \"other\"; it has scale"),
            "{missing}"
        );
    }

    #[test]
    fn bundles_are_opened() {
        let object = elf(&metadata("k", &[("global_buffer", 8)], 1024));
        let host_id = b"host-x86_64-unknown-linux--";
        let gpu_id = b"hipv4-amdgcn-amd-amdhsa--gfx90a";
        let header_len = BUNDLE_MAGIC.len() + 8 + 2 * 24 + host_id.len() + gpu_id.len();
        let mut bundle = BUNDLE_MAGIC.to_vec();
        bundle.extend_from_slice(&2u64.to_le_bytes());
        for (id, offset, size) in [
            (&host_id[..], header_len as u64, 0u64),
            (&gpu_id[..], header_len as u64, object.len() as u64),
        ] {
            bundle.extend_from_slice(&offset.to_le_bytes());
            bundle.extend_from_slice(&size.to_le_bytes());
            bundle.extend_from_slice(&(id.len() as u64).to_le_bytes());
            bundle.extend_from_slice(id);
        }
        assert_eq!(bundle.len(), header_len);
        bundle.extend_from_slice(&object);
        let found = read(&bundle).expect("metadata in the bundle");
        assert_eq!(found[0].args, [Arg::Pointer]);
        let sig = Signature::new("k").binding(Access::Read);
        assert_eq!(check(&found, "k", &sig), Ok(()));
    }

    #[test]
    fn what_cannot_be_read_is_no_metadata() {
        assert_eq!(read(b"FAKE"), None);
        assert_eq!(read(b""), None);
        assert_eq!(read(&elf(&[0xc1])), None);
        // A note that is not the metadata one.
        let mut other = elf(b"\x80");
        other[64 + 8] = 1;
        assert_eq!(read(&other), None);
        // Every truncation of a good image and of its metadata reads as
        // nothing or as something, never a panic.
        let meta = metadata("scale", &[("global_buffer", 8), ("by_value", 4)], 64);
        let image = elf(&meta);
        for end in 0..image.len() {
            let _ = read(&image[..end]);
        }
        for end in 0..meta.len() {
            assert!(kernels(&meta[..end]).is_none());
        }
        // A count promising more items than there are bytes is refused
        // before anything is allocated for it.
        assert!(kernels(&[0xdf, 0xff, 0xff, 0xff, 0xff]).is_none());
        // Nesting deeper than any metadata is refused, not recursed into.
        assert!(
            Reader {
                bytes: &[0x91; 64],
                at: 0
            }
            .value(0)
            .is_none()
        );
    }

    #[test]
    fn message_pack_scalars() {
        fn read_one(bytes: &[u8]) -> Option<Value<'_>> {
            Reader { bytes, at: 0 }.value(0)
        }
        assert_eq!(read_one(&[0x05]), Some(Value::Uint(5)));
        assert_eq!(read_one(&[0xcd, 0x01, 0x00]), Some(Value::Uint(256)));
        assert_eq!(read_one(&[0xff]), Some(Value::Int(-1)));
        assert_eq!(read_one(&[0xd0, 0x80]), Some(Value::Int(-128)));
        assert_eq!(read_one(&[0xd1, 0xff, 0xfe]), Some(Value::Int(-2)));
        assert_eq!(read_one(&[0xc3]), Some(Value::Bool(true)));
        assert_eq!(read_one(&[0xc0]), Some(Value::Nil));
        assert_eq!(read_one(&[0xca, 0, 0, 0, 0]), Some(Value::Float));
        assert_eq!(read_one(&[0xd9, 2, b'h', b'i']), Some(Value::Str("hi")));
        assert_eq!(read_one(&[0xc4, 1, 9]), Some(Value::Bytes));
        assert_eq!(read_one(&[0xd4, 1, 9]), Some(Value::Bytes));
        assert_eq!(
            read_one(&[0x92, 0x01, 0xa1, b'x']),
            Some(Value::Array(vec![Value::Uint(1), Value::Str("x")]))
        );
    }
}
