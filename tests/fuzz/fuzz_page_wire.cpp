// Page request and reply headers from a peer.
#include "wire/page_wire.hpp"

#include <cstdint>
#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace ferry::wire;
    header_bytes h{};
    std::memcpy(h.data(), data, std::min(size, h.size()));
    page_request req;
    if (decode(h, req) == decode_error::none)
        (void)encode(req);
    page_reply rep;
    if (decode(h, rep) == decode_error::none)
        (void)to_string(rep.result);
    return 0;
}
