//! Transparent huge pages for weight matrices (Linux): a one-sequence decode step streams
//! every weight once, so 4 KiB pages cost a TLB miss every 4 KiB of weights; llama.cpp's
//! mapped GGUF file gets the page cache's large folios instead.

use super::QMatrix;

/// Bytes of one huge page (x86-64 and the usual arm64 kernels).
const HUGE: usize = 2 << 20;

/// The 2 MiB-aligned spans covering `ranges` (`(address, bytes)`), merged and sorted.
fn huge_spans(ranges: impl IntoIterator<Item = (usize, usize)>) -> Vec<(usize, usize)> {
    let mut spans: Vec<(usize, usize)> = ranges
        .into_iter()
        .filter(|&(_, len)| len > 0)
        .map(|(at, len)| (at / HUGE * HUGE, (at + len).div_ceil(HUGE) * HUGE))
        .collect();
    spans.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// Asks the kernel to back the weights of `matrices` with huge pages, now (`MADV_COLLAPSE`,
/// which copies them once: about a second per 100 MB on a busy 2-core VM) and for pages
/// faulted later (`MADV_HUGEPAGE`). Only advice: the spans are rounded out to whole huge
/// pages (neighbouring heap memory keeps its contents), and a kernel that refuses leaves
/// 4 KiB pages, which compute the same numbers.
pub fn advise_huge_pages<'a>(matrices: impl IntoIterator<Item = &'a QMatrix>) {
    let spans = huge_spans(matrices.into_iter().flat_map(QMatrix::weight_ranges));
    for (start, end) in spans {
        advise(start, end - start);
    }
}

#[cfg(target_os = "linux")]
fn advise(start: usize, len: usize) {
    /// `MADV_COLLAPSE` (Linux 6.1), named here for libc crates that predate it.
    const MADV_COLLAPSE: libc::c_int = 25;
    // SAFETY: these advice values change how pages are backed, never their contents; on a
    // range that is not (all) mapped madvise fails with ENOMEM, which is ignored (advice).
    unsafe {
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        libc::madvise(start as *mut libc::c_void, len, MADV_COLLAPSE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_start: usize, _len: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_round_out_to_huge_pages_and_merge() {
        let m = HUGE;
        let spans = huge_spans([(5 * m + 10, 100), (m + 1, m), (2 * m + 3, 5), (0, 0)]);
        // (m+1, m) covers [m, 3m); (2m+3, 5) lies inside it; (5m+10, 100) is [5m, 6m); the
        // empty range is dropped.
        assert_eq!(spans, vec![(m, 3 * m), (5 * m, 6 * m)]);
    }

    #[test]
    fn advice_leaves_the_weights_unchanged() {
        let bytes: Vec<u8> = (0..64 * 576 / 32 * 20)
            .map(|i| (i * 7 % 61) as u8)
            .collect();
        let w = QMatrix::from_ggml(crate::gguf::GgmlType::Q4_1, &bytes, 64, 576)
            .unwrap_or_else(|e| panic!("valid Q4_1 bytes: {e}"));
        let bits = |w: &QMatrix| {
            let mut row = vec![0f32; 576];
            w.row_f32(63, &mut row);
            row.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        let before = bits(&w);
        advise_huge_pages([&w]);
        assert_eq!(bits(&w), before);
    }
}
