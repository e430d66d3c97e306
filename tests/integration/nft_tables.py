"""Lists the nftables tables of the current network namespace through
libnftables (the library CRIU's network lock uses), for hosts without the
nft command: run it under `nsenter -n`. Exits with libnftables' status."""
import ctypes
lib = ctypes.CDLL("libnftables.so.1")
lib.nft_ctx_new.restype = ctypes.c_void_p
lib.nft_ctx_get_output_buffer.restype = ctypes.c_char_p
lib.nft_ctx_get_output_buffer.argtypes = [ctypes.c_void_p]
lib.nft_ctx_buffer_output.argtypes = [ctypes.c_void_p]
lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
ctx = lib.nft_ctx_new(0)
lib.nft_ctx_buffer_output(ctx)
rc = lib.nft_run_cmd_from_buffer(ctx, b"list tables")
print(lib.nft_ctx_get_output_buffer(ctx).decode(), end="")
raise SystemExit(rc)
