"""Device code read from binaries (cubin, fatbin, object, executable, shared library): `tileprobe inspect`."""
