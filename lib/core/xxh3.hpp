// XXH3 with the widest vector code the CPU has. On x86-64 it goes through
// libxxhash's runtime dispatcher: Debian's plain XXH3_64bits is its SSE2
// build, 18 GB/s over 4 KiB pages on this project's VM against 40 GB/s
// dispatched (AVX-512). The hash is the same either way.
#pragma once

#if defined(__x86_64__)
#include <xxh_x86dispatch.h> // makes XXH3_64bits* the dispatching ones
#else
#include <xxhash.h>
#endif
