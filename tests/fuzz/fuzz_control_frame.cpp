// Control frames as a peer sends them after its handshake: a 12-byte header,
// then a protobuf-c envelope. Malformed input must give an error, nothing else.
#include "wire/control.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace ferry::control;
    const auto* bytes = reinterpret_cast<const std::byte*>(data);
    if (size >= frame_header_size) {
        uint32_t len = 0;
        (void)decode_frame_header(
            std::span<const std::byte, frame_header_size>(bytes, frame_header_size), len);
    }
    // The payload alone, whatever the header said.
    if (auto e = decode_payload(std::span(bytes, size))) {
        (void)body_name(*e);
        try {
            expect(e.get(), FERRY_CONTROL__ENVELOPE__BODY_PAGE_CHANNEL_OPEN, "fuzz");
        } catch (const std::exception&) {
            // the error path: what a peer gets for a wrong message
        }
    }
    return 0;
}
