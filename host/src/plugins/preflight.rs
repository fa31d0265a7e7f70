//! What is checked before a library is opened: that the file is a shared
//! object built for this machine, and whole.
//!
//! The dynamic loader maps a library's loadable segments straight from the
//! file; a segment that reaches past the end of a truncated file (a partial
//! copy, a full disk) faults with SIGBUS the moment the loader touches it,
//! killing the host before any error can be reported. So, before `dlopen`,
//! this reads the ELF header and program headers alone (a few hundred bytes,
//! whatever the library's size) and refuses a file that is not ELF, is for
//! another machine, is not a shared object, or whose segments the file does
//! not hold. It never opens the library itself.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// `e_type` of a shared object.
const ET_DYN: u16 = 3;
/// `p_type` of a loadable segment.
const PT_LOAD: u32 = 1;
/// The most program headers read (real libraries have about ten).
const MAX_PROGRAM_HEADERS: u16 = 4096;

/// This machine's `e_machine` and ELF class (64-bit or not), where known.
fn host_machine() -> Option<(u16, bool, &'static str)> {
    if cfg!(target_arch = "x86_64") {
        Some((62, true, "x86-64"))
    } else if cfg!(target_arch = "aarch64") {
        Some((183, true, "AArch64"))
    } else if cfg!(target_arch = "riscv64") {
        Some((243, true, "RISC-V 64"))
    } else if cfg!(target_arch = "powerpc64") {
        Some((21, true, "PowerPC 64"))
    } else if cfg!(target_arch = "s390x") {
        Some((22, true, "s390x"))
    } else if cfg!(target_arch = "x86") {
        Some((3, false, "x86"))
    } else if cfg!(target_arch = "arm") {
        Some((40, false, "ARM"))
    } else {
        None
    }
}

/// A name for an ELF machine, for messages.
fn machine_name(machine: u16) -> String {
    match machine {
        3 => "x86".into(),
        40 => "ARM".into(),
        62 => "x86-64".into(),
        183 => "AArch64".into(),
        243 => "RISC-V".into(),
        21 => "PowerPC 64".into(),
        22 => "s390x".into(),
        other => format!("machine {other}"),
    }
}

/// Why the file at `path` must not be opened as a library, if it must not.
/// On platforms whose libraries are not ELF, nothing is checked.
pub fn problem(path: &Path) -> Option<String> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return Some(format!("cannot be read: {e}")),
    };
    let len = match file.metadata() {
        Ok(m) => m.len(),
        Err(e) => return Some(format!("cannot be read: {e}")),
    };
    elf_problem(&mut file, len)
}

/// [`problem`] for any reader of `len` bytes (tests give it byte slices).
fn elf_problem(file: &mut (impl Read + Seek), len: u64) -> Option<String> {
    let mut ident = [0u8; 16];
    if len < 16 || file.read_exact(&mut ident).is_err() {
        return Some(format!(
            "not a shared library: {len} bytes, too short for an ELF header"
        ));
    }
    if ident[..4] != *b"\x7fELF" {
        return Some("not a shared library: no ELF header".into());
    }
    let wide = match ident[4] {
        1 => false,
        2 => true,
        other => {
            return Some(format!(
                "not a shared library: ELF class {other} is unknown"
            ))
        }
    };
    let little = match ident[5] {
        1 => true,
        2 => false,
        other => {
            return Some(format!(
                "not a shared library: ELF data encoding {other} is unknown"
            ))
        }
    };
    let header_len = if wide { 64 } else { 52 };
    if len < header_len {
        return Some(format!(
            "truncated: {len} bytes, too short for its {header_len}-byte ELF header"
        ));
    }
    let mut rest = vec![0u8; header_len as usize - 16];
    if file.read_exact(&mut rest).is_err() {
        return Some("truncated: the ELF header cannot be read".into());
    }
    let u16_at = |b: &[u8], at: usize| {
        let v = [b[at], b[at + 1]];
        if little {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        }
    };
    let u32_at = |b: &[u8], at: usize| {
        let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if little {
            u32::from_le_bytes(v)
        } else {
            u32::from_be_bytes(v)
        }
    };
    let u64_at = |b: &[u8], at: usize| {
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[at..at + 8]);
        if little {
            u64::from_le_bytes(v)
        } else {
            u64::from_be_bytes(v)
        }
    };
    // Offsets below are into the header after its 16 identification bytes.
    let e_type = u16_at(&rest, 0);
    let machine = u16_at(&rest, 2);
    let (phoff, phentsize, phnum) = if wide {
        (u64_at(&rest, 16), u16_at(&rest, 38), u16_at(&rest, 40))
    } else {
        (
            u64::from(u32_at(&rest, 12)),
            u16_at(&rest, 26),
            u16_at(&rest, 28),
        )
    };
    if let Some((host, host_wide, host_name)) = host_machine() {
        if machine != host || wide != host_wide || little != cfg!(target_endian = "little") {
            return Some(format!(
                "built for another machine: {} {}-bit {}-endian, this host is {host_name}",
                machine_name(machine),
                if wide { 64 } else { 32 },
                if little { "little" } else { "big" }
            ));
        }
    }
    if e_type != ET_DYN {
        return Some(format!(
            "not a shared library: ELF type {e_type} (a shared object is {ET_DYN})"
        ));
    }
    let entry = if wide { 56 } else { 32 };
    if usize::from(phentsize) < entry || phnum > MAX_PROGRAM_HEADERS {
        return Some(format!(
            "malformed: {phnum} program headers of {phentsize} bytes"
        ));
    }
    let table_end = phoff.checked_add(u64::from(phentsize) * u64::from(phnum));
    if table_end.is_none_or(|end| end > len) {
        return Some(format!(
            "truncated: {len} bytes, but its program headers end at byte {}",
            table_end.map_or("beyond 2^64".into(), |e| e.to_string())
        ));
    }
    let mut table = vec![0u8; usize::from(phentsize) * usize::from(phnum)];
    if file.seek(SeekFrom::Start(phoff)).is_err() || file.read_exact(&mut table).is_err() {
        return Some("truncated: the program headers cannot be read".into());
    }
    for (i, header) in table.chunks_exact(usize::from(phentsize)).enumerate() {
        if u32_at(header, 0) != PT_LOAD {
            continue;
        }
        let (offset, size) = if wide {
            (u64_at(header, 8), u64_at(header, 32))
        } else {
            (u64::from(u32_at(header, 4)), u64::from(u32_at(header, 16)))
        };
        match offset.checked_add(size) {
            Some(end) if end <= len => {}
            end => {
                return Some(format!(
                    "truncated: {len} bytes, but loadable segment {i} ends at byte {} \
                     (a partial copy? copy the library again)",
                    end.map_or("beyond 2^64".into(), |e| e.to_string())
                ))
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A minimal 64-bit little-endian shared object header for this machine
    /// with one loadable segment covering `segment_end` bytes.
    fn elf(machine: u16, e_type: u16, segment_end: u64) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[16..18].copy_from_slice(&e_type.to_le_bytes());
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        b[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        b[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
        b[64..68].copy_from_slice(&PT_LOAD.to_le_bytes());
        b[64 + 32..64 + 40].copy_from_slice(&segment_end.to_le_bytes()); // p_filesz
        b
    }

    fn check(bytes: &[u8]) -> Option<String> {
        elf_problem(&mut Cursor::new(bytes), bytes.len() as u64)
    }

    #[test]
    fn whole_libraries_for_this_machine_pass_and_others_say_why() {
        let Some((host, true, _)) = host_machine() else {
            return;
        };
        assert_eq!(check(&elf(host, ET_DYN, 100)), None);
        let truncated = check(&elf(host, ET_DYN, 4096)).expect("segment past the end");
        assert!(truncated.starts_with("truncated: 120 bytes"), "{truncated}");
        let other = if host == 62 { 183 } else { 62 };
        let foreign = check(&elf(other, ET_DYN, 100)).expect("another machine");
        assert!(
            foreign.starts_with("built for another machine"),
            "{foreign}"
        );
        let executable = check(&elf(host, 2, 100)).expect("not a shared object");
        assert!(executable.contains("ELF type 2"), "{executable}");
        assert!(check(&[0u8; 4096])
            .expect("zeros")
            .contains("no ELF header"));
        assert!(check(b"#!/bin/sh\n").expect("text").contains("too short"));
        for cut in [16, 20, 63, 64, 100, 119] {
            let bytes = elf(host, ET_DYN, 100);
            let problem = check(&bytes[..cut]).expect("a prefix");
            assert!(
                problem.starts_with("truncated") || problem.contains("too short"),
                "{cut}: {problem}"
            );
        }
    }
}
