"""Calculator-assisted decoding: exact results for the sums a reasoning trace writes out."""
