//! Memory-mapped external data files, and giving their pages back once read.
//!
//! A tensor in an external data file is a slice of the file's mapping. Reading every weight once
//! (the parity run decodes them; saving writes them out) maps every page of the file into the
//! process, so without help the peak RSS is the whole file *plus* the decoded copy. Once a
//! slice has been decoded or written, [`release`] tells the kernel to drop its pages from this
//! process (`madvise(MADV_DONTNEED)`). The mapping is private and read-only, so a later read
//! faults the same bytes back in from the page cache or the file. Nothing changes but RSS and
//! the cost of a second read.
//!
//! Only slices of mappings made here are ever advised: [`release`] looks the address range up
//! in the registry of live mappings, and does nothing for any other buffer (heap, wasm memory),
//! where `MADV_DONTNEED` would zero the memory.

use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use memmap2::{Mmap, UncheckedAdvice};

/// The mapping as a `Bytes` owner; the registry holds a weak reference to the same map.
struct Owner(Arc<Mmap>);

impl AsRef<[u8]> for Owner {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Slices shorter than this are left mapped.
const RELEASE_MIN_BYTES: usize = 64 << 10;

/// Live mappings: (start address, length, the map while any tensor still slices it).
static LIVE: Mutex<Vec<(usize, usize, Weak<Mmap>)>> = Mutex::new(Vec::new());

/// `file` mapped read-only as `Bytes`, registered so that [`release`] can advise its slices.
pub fn map(file: &std::fs::File) -> std::io::Result<Bytes> {
    // SAFETY: the mapping is read-only and private to this process; its bytes are only read, and
    // (like every memory-mapped reader) this assumes nobody truncates or rewrites the file while
    // the model is loaded.
    let map = Arc::new(unsafe { Mmap::map(file) }?);
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|(_, _, w)| w.strong_count() > 0);
    live.push((map.as_ptr() as usize, map.len(), Arc::downgrade(&map)));
    drop(live);
    Ok(Bytes::from_owner(Owner(map)))
}

/// Drops the pages behind `bytes` from this process when `bytes` lies in a mapping made by
/// [`map`]; otherwise does nothing. A hint: errors are ignored (the pages simply stay).
pub fn release(bytes: &[u8]) {
    // Small tensors share pages with their neighbours and are not worth a system call.
    if bytes.len() < RELEASE_MIN_BYTES {
        return;
    }
    let start = bytes.as_ptr() as usize;
    let map = {
        let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        live.iter()
            .find(|(s, len, _)| start >= *s && start + bytes.len() <= s + len)
            .and_then(|(s, _, w)| Some((*s, w.upgrade()?)))
    };
    if let Some((s, map)) = map {
        // SAFETY: the range lies inside `map` (checked above, and `map` is alive: we hold it).
        // The mapping is private, read-only and file-backed, so MADV_DONTNEED only drops pages
        // that a later read faults back in with the same bytes from the file; no Rust reference
        // sees different contents. memmap2 aligns the start down to a page: a neighbour's bytes
        // on that page are re-read the same way.
        let _ = unsafe {
            map.unchecked_advise_range(UncheckedAdvice::DontNeed, start - s, bytes.len())
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8 + 1).collect()
    }

    #[test]
    fn released_pages_read_back_the_same_bytes() {
        let dir = std::env::temp_dir().join(format!("fuselab-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.data");
        let want = pattern(1 << 20);
        std::fs::write(&path, &want).unwrap();
        let bytes = map(&std::fs::File::open(&path).unwrap()).unwrap();
        // An unaligned slice in the middle, read, released, read again.
        let part = bytes.slice(4099..(1 << 19) + 17);
        assert_eq!(&part[..], &want[4099..(1 << 19) + 17]);
        release(&part);
        assert_eq!(&part[..], &want[4099..(1 << 19) + 17]);
        assert_eq!(&bytes[..], &want[..], "the neighbours' bytes too");
        drop((part, bytes));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn other_buffers_are_left_alone() {
        // MADV_DONTNEED on anonymous memory would zero it: release must not advise a heap buffer.
        let heap = pattern(1 << 20);
        release(&heap);
        assert_eq!(heap, pattern(1 << 20));
        let owned = Bytes::from(pattern(1 << 20));
        release(&owned);
        assert_eq!(&owned[..], &pattern(1 << 20)[..]);
    }
}
