//! The guest's global allocator: a bump arena in front of the system allocator.
//!
//! The host runs every reconcile in a fresh instance and discards its memory afterwards, so a
//! reconcile's allocations never need to be reused: handing them out from a bump pointer and
//! ignoring frees is enough, and much cheaper than a general-purpose allocator compiled to
//! WebAssembly. Measured with `host/benches/reconcile.rs`, the benchmark guest's call got about
//! 15 % faster. Written here rather than taken from a crate because the allocators made for
//! WebAssembly (dlmalloc, which std uses, and talc) were measured no faster: the gain comes
//! from not freeing at all, which only a host that throws instances away makes safe.
//!
//! What keeps it bounded:
//! - The arena is a fixed static region (zero pages until touched, so it costs nothing until
//!   used). Once it is full, allocations go to the system allocator (wasi-libc's dlmalloc),
//!   which reuses freed memory as usual: a guest that allocates and frees in a long loop does
//!   not run out of memory sooner than it would without the arena.
//! - Freeing the most recent allocation gives its space back, and growing the most recent
//!   allocation happens in place, so a `Vec` or `String` being built does not leave copies of
//!   itself behind.
//!
//! What it never holds: the blocks the host writes into the guest (the request, every import's
//! answer), which the component model asks for through `cabi_realloc`. wasi-libc frees what
//! WASI imports return with its own `free` (`std::env` reads the environment that way), and
//! `free` on arena memory corrupts its heap, so the SDK's `cabi_realloc` takes them from
//! wasi-libc's `malloc`; dropped on the Rust side, they go back there through the fallback.
//! Measured with `host/benches/reconcile.rs`, the benchmark guest's call is unchanged (within
//! noise) by it.
//!
//! The cost: pages of the arena a reconcile touched are dirty and the host resets them when
//! the instance is dropped, so up to [`ARENA_BYTES`] more memory may be reset than with a
//! reusing allocator. A guest that sets its own `#[global_allocator]` turns this off with
//! `default-features = false` on the SDK; std's `cabi_realloc` then allocates from that
//! allocator, so it must be one whose blocks wasi-libc's `free` accepts, or the guest defines
//! `cabi_realloc` as below.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::{Cell, UnsafeCell};
use core::mem::MaybeUninit;

/// Size of the arena. Enough for a reconcile of a typical object (a ~1 KB object parsed into
/// `serde_json::Value` and a status patch built takes about 10 KiB).
pub const ARENA_BYTES: usize = 256 * 1024;

/// A bump arena of `N` bytes in front of `Fallback`.
pub struct Arena<Fallback, const N: usize> {
    memory: UnsafeCell<Aligned<N>>,
    /// Offset of the first free byte.
    next: Cell<usize>,
    /// Offset of the most recent allocation (the one that can be freed or grown in place).
    last: Cell<Option<usize>>,
    fallback: Fallback,
}

/// The arena's bytes, aligned for anything `malloc` would return.
#[repr(align(16))]
struct Aligned<const N: usize>([MaybeUninit<u8>; N]);

impl<Fallback, const N: usize> Arena<Fallback, N> {
    pub const fn new(fallback: Fallback) -> Self {
        Self {
            memory: UnsafeCell::new(Aligned([MaybeUninit::uninit(); N])),
            next: Cell::new(0),
            last: Cell::new(None),
            fallback,
        }
    }

    fn base(&self) -> usize {
        self.memory.get() as usize
    }

    /// The arena offset of `ptr`, when it points into the arena.
    fn offset_of(&self, ptr: *mut u8) -> Option<usize> {
        (ptr as usize)
            .checked_sub(self.base())
            .filter(|offset| *offset < N)
    }

    /// Bumps out `layout` from the arena, or `None` when it does not fit.
    fn bump(&self, layout: Layout) -> Option<*mut u8> {
        // Alignments are powers of two: round up with a mask (a remainder is a division,
        // which costs more than the rest of this function in WebAssembly).
        let mask = layout.align() - 1;
        let start = (self.base() + self.next.get()).checked_add(mask)? & !mask;
        let offset = start - self.base();
        let end = offset.checked_add(layout.size()).filter(|end| *end <= N)?;
        self.next.set(end);
        self.last.set(Some(offset));
        Some(start as *mut u8)
    }
}

// SAFETY: the arena hands out disjoint ranges of its own memory, each aligned as asked
// (`bump`), and passes anything else to the fallback unchanged. It is `Sync` only where there
// are no threads (see the global below); tests use unshared instances.
unsafe impl<Fallback: GlobalAlloc, const N: usize> GlobalAlloc for Arena<Fallback, N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout) {
            Some(ptr) => ptr,
            // SAFETY: the caller's guarantees about `layout` are passed on unchanged.
            None => unsafe { self.fallback.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.offset_of(ptr) {
            Some(offset) => {
                if self.last.get() == Some(offset) {
                    self.next.set(offset);
                    self.last.set(None);
                }
            }
            // SAFETY: not ours, so the fallback allocated it with this layout.
            None => unsafe { self.fallback.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(offset) = self.offset_of(ptr) else {
            // SAFETY: not ours, so the fallback allocated it with this layout.
            return unsafe { self.fallback.realloc(ptr, layout, new_size) };
        };
        let last = self.last.get() == Some(offset);
        if last && offset.checked_add(new_size).is_some_and(|end| end <= N) {
            self.next.set(offset + new_size);
            return ptr;
        }
        if new_size <= layout.size() {
            // Shrinking an earlier block: it still fits where it is.
            return ptr;
        }
        // SAFETY: `realloc`'s contract makes this a valid layout (non-zero size, no overflow).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as for `alloc`.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live and distinct, each at least this long.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

/// The global allocator of a guest instance: WebAssembly without threads, so nothing else
/// ever touches the arena's cells concurrently.
#[cfg(all(
    feature = "arena",
    target_family = "wasm",
    not(target_feature = "atomics")
))]
mod global {
    use super::{ARENA_BYTES, Arena};

    // SAFETY: single-threaded WebAssembly (no `atomics` target feature): no concurrent access.
    unsafe impl<Fallback: Sync, const N: usize> Sync for Arena<Fallback, N> {}

    #[global_allocator]
    static GLOBAL: Arena<std::alloc::System, ARENA_BYTES> = Arena::new(std::alloc::System);

    /// The canonical ABI's allocator, which the host writes the request and every import's
    /// answer into. Defined here, it replaces std's (a weak symbol over the global allocator).
    ///
    /// # Safety
    ///
    /// As `realloc`: `old_ptr` is null with `old_len` 0, or a block this function returned with
    /// that size and alignment; `align` is a power of two.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn cabi_realloc(
        old_ptr: *mut u8,
        old_len: usize,
        align: usize,
        new_len: usize,
    ) -> *mut u8 {
        use std::alloc::{GlobalAlloc as _, Layout, System};
        // Not the arena: wasi-libc `free`s what WASI imports return (the environment, issue 52).
        // SAFETY: the caller's guarantees are `alloc`'s and `realloc`'s, passed on unchanged.
        let ptr = unsafe {
            if old_len == 0 {
                if new_len == 0 {
                    return core::ptr::without_provenance_mut(align);
                }
                System.alloc(Layout::from_size_align_unchecked(new_len, align))
            } else {
                System.realloc(
                    old_ptr,
                    Layout::from_size_align_unchecked(old_len, align),
                    new_len,
                )
            }
        };
        if ptr.is_null() {
            std::process::abort();
        }
        ptr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    fn in_arena<F, const N: usize>(arena: &Arena<F, N>, ptr: *mut u8) -> bool {
        arena.offset_of(ptr).is_some()
    }

    #[test]
    fn bumps_aligned_disjoint_blocks_from_the_arena() {
        let arena = Arena::<_, 1024>::new(System);
        unsafe {
            let a = arena.alloc(layout(3, 1));
            let b = arena.alloc(layout(8, 8));
            let c = arena.alloc(layout(16, 16));
            for p in [a, b, c] {
                assert!(in_arena(&arena, p));
            }
            assert_eq!(b as usize % 8, 0);
            assert_eq!(c as usize % 16, 0);
            assert!(b as usize >= a as usize + 3);
            assert!(c as usize >= b as usize + 8);
            // Each block holds its own bytes.
            a.write_bytes(0xaa, 3);
            b.write_bytes(0xbb, 8);
            c.write_bytes(0xcc, 16);
            assert_eq!(*a.add(2), 0xaa);
            assert_eq!(*b.add(7), 0xbb);
            assert_eq!(*c, 0xcc);
        }
    }

    #[test]
    fn freeing_the_last_block_gives_its_space_back_and_others_are_kept() {
        let arena = Arena::<_, 1024>::new(System);
        unsafe {
            let a = arena.alloc(layout(100, 8));
            let b = arena.alloc(layout(100, 8));
            arena.dealloc(b, layout(100, 8));
            assert_eq!(
                arena.alloc(layout(100, 8)),
                b,
                "the last block's space is reused"
            );
            // Freeing an earlier block reclaims nothing: the next block comes after the others.
            arena.dealloc(a, layout(100, 8));
            let c = arena.alloc(layout(8, 8));
            assert!(c as usize > b as usize);
        }
    }

    #[test]
    fn the_last_block_grows_and_shrinks_in_place_and_others_move_with_their_contents() {
        let arena = Arena::<_, 1024>::new(System);
        unsafe {
            let a = arena.alloc(layout(4, 1));
            a.copy_from(b"abcd".as_ptr(), 4);
            assert_eq!(arena.realloc(a, layout(4, 1), 64), a, "grown in place");
            assert_eq!(arena.realloc(a, layout(64, 1), 8), a, "shrunk in place");
            let b = arena.alloc(layout(8, 1));
            assert!(
                b as usize == a as usize + 8,
                "the shrink gave the tail back"
            );
            assert_eq!(
                arena.realloc(a, layout(8, 1), 2),
                a,
                "an earlier block shrinks in place"
            );
            let moved = arena.realloc(a, layout(2, 1), 32);
            assert_ne!(moved, a, "not the last block: moved");
            assert!(in_arena(&arena, moved));
            assert_eq!(std::slice::from_raw_parts(moved, 2), b"ab");
        }
    }

    #[test]
    fn a_full_arena_hands_over_to_the_fallback_which_frees_for_real() {
        let arena = Arena::<_, 256>::new(System);
        unsafe {
            let a = arena.alloc(layout(200, 8));
            assert!(in_arena(&arena, a));
            let big = arena.alloc(layout(100, 8));
            assert!(!big.is_null());
            assert!(!in_arena(&arena, big), "does not fit: from the fallback");
            big.write_bytes(1, 100);
            // Growing past the end moves an arena block to the fallback, contents intact.
            a.write_bytes(7, 200);
            let grown = arena.realloc(a, layout(200, 8), 400);
            assert!(!in_arena(&arena, grown));
            assert_eq!(*grown.add(199), 7);
            // The move gave the arena's space back (it was the last block).
            let again = arena.alloc(layout(200, 8));
            assert_eq!(again, a);
            // Fallback blocks are freed and resized by the fallback.
            let big = arena.realloc(big, layout(100, 8), 1000);
            assert_eq!(*big.add(99), 1);
            arena.dealloc(big, layout(1000, 8));
            arena.dealloc(grown, layout(400, 8));
        }
    }

    #[test]
    fn an_alignment_larger_than_the_arena_start_is_honoured() {
        let arena = Arena::<_, 4096>::new(System);
        unsafe {
            arena.alloc(layout(1, 1));
            let p = arena.alloc(layout(64, 256));
            assert_eq!(p as usize % 256, 0);
            assert!(in_arena(&arena, p));
        }
    }
}
