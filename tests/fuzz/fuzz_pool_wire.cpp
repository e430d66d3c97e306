// Pool request and reply headers from a peer.
#include "wire/pool_wire.hpp"

#include <cstdint>
#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace ferry::pool;
    header_bytes h{};
    std::memcpy(h.data(), data, std::min(size, h.size()));
    request req;
    if (decode(h, req) == decode_error::none)
        (void)to_string(req.operation);
    reply rep;
    if (decode(h, rep) == decode_error::none)
        (void)to_string(rep.result);
    return 0;
}
