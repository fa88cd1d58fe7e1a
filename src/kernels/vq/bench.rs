//! `tilus bench vq` (filled in below).
