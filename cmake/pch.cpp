// Translation unit that owns the precompiled torch header.
