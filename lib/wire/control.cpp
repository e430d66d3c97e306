#include "wire/control.hpp"

#include "core/error.hpp"

#include <fmt/format.h>

#include <cstring>

namespace ferry::control {

namespace {

void store_le32(std::byte* p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = std::byte(v >> (8 * i));
}
void store_le16(std::byte* p, uint16_t v) {
    p[0] = std::byte(v);
    p[1] = std::byte(v >> 8);
}
uint32_t load_le32(const std::byte* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= uint32_t(std::to_integer<uint8_t>(p[i])) << (8 * i);
    return v;
}
uint16_t load_le16(const std::byte* p) {
    return uint16_t(std::to_integer<uint8_t>(p[0]) | (std::to_integer<uint8_t>(p[1]) << 8));
}

} // namespace

const char* to_string(frame_error e) noexcept {
    switch (e) {
    case frame_error::none:
        return "none";
    case frame_error::bad_magic:
        return "bad frame magic";
    case frame_error::bad_version:
        return "unsupported frame version";
    case frame_error::bad_reserved:
        return "reserved header bits set";
    case frame_error::too_large:
        return "frame too large";
    }
    return "unknown frame error";
}

std::vector<std::byte> encode_frame(const envelope& e) {
    const size_t len = ferry_control__envelope__get_packed_size(&e);
    if (len > max_frame_payload)
        throw error(fmt::format("control message of {} bytes exceeds the frame limit", len));
    std::vector<std::byte> out(frame_header_size + len);
    store_le32(&out[0], frame_magic);
    store_le16(&out[4], frame_version);
    store_le16(&out[6], 0);
    store_le32(&out[8], uint32_t(len));
    ferry_control__envelope__pack(&e, reinterpret_cast<uint8_t*>(out.data() + frame_header_size));
    return out;
}

frame_error decode_frame_header(std::span<const std::byte, frame_header_size> h,
                                uint32_t& payload_len) noexcept {
    if (load_le32(&h[0]) != frame_magic)
        return frame_error::bad_magic;
    if (load_le16(&h[4]) != frame_version)
        return frame_error::bad_version;
    if (load_le16(&h[6]) != 0)
        return frame_error::bad_reserved;
    payload_len = load_le32(&h[8]);
    if (payload_len > max_frame_payload)
        return frame_error::too_large;
    return frame_error::none;
}

envelope_ptr decode_payload(std::span<const std::byte> payload) noexcept {
    envelope* e = ferry_control__envelope__unpack(nullptr, payload.size(),
                                                  reinterpret_cast<const uint8_t*>(payload.data()));
    envelope_ptr p(e);
    if (p && p->body_case == FERRY_CONTROL__ENVELOPE__BODY__NOT_SET)
        return nullptr;
    return p;
}

void send(net::stream& s, const envelope& e, net::deadline until) {
    auto frame = encode_frame(e);
    net::write_full(s, frame, until, "send control frame");
}

envelope_ptr receive(net::stream& s, net::deadline until) {
    std::array<std::byte, frame_header_size> header;
    if (!net::read_full(s, header, until, "receive control frame"))
        return nullptr;
    uint32_t len = 0;
    if (auto err = decode_frame_header(header, len); err != frame_error::none)
        throw error(fmt::format("malformed control frame: {}", to_string(err)));
    std::vector<std::byte> payload(len);
    if (len && !net::read_full(s, payload, until, "receive control frame"))
        throw error("malformed control frame: connection closed before the payload");
    auto e = decode_payload(payload);
    if (!e)
        throw error("malformed control frame: the payload is not a valid message");
    return e;
}

void send_error(net::stream& s, const std::string& message, net::deadline until) {
    FerryControl__ErrorReply r = FERRY_CONTROL__ERROR_REPLY__INIT;
    r.message = const_cast<char*>(message.c_str());
    send_message(s, r, until);
}

const char* body_name(const envelope& e) noexcept {
    const ProtobufCFieldDescriptor* f = protobuf_c_message_descriptor_get_field(
        &ferry_control__envelope__descriptor, unsigned(e.body_case));
    return f ? f->name : "nothing";
}

void expect(const envelope* e, FerryControl__Envelope__BodyCase want, const std::string& peer) {
    if (!e)
        throw error(fmt::format("{} closed the connection", peer));
    if (e->body_case == want)
        return;
    if (e->body_case == FERRY_CONTROL__ENVELOPE__BODY_ERROR)
        throw error(fmt::format("{}: {}", peer, e->error->message));
    const ProtobufCFieldDescriptor* f = protobuf_c_message_descriptor_get_field(
        &ferry_control__envelope__descriptor, unsigned(want));
    throw error(
        fmt::format("{} sent {} where {} was expected", peer, body_name(*e), f ? f->name : "?"));
}

bool try_send(net::stream& s, const envelope& e, net::deadline until) noexcept {
    try {
        send(s, e, until);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

bool try_send_error(net::stream& s, const std::string& message, net::deadline until) noexcept {
    try {
        send_error(s, message, until);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

// The same over an fd someone else owns (a local socket pair).
void send(int fd, const envelope& e, net::deadline until) {
    auto s = net::socket_stream::view(fd);
    send(s, e, until);
}

envelope_ptr receive(int fd, net::deadline until) {
    auto s = net::socket_stream::view(fd);
    return receive(s, until);
}

void send_error(int fd, const std::string& message, net::deadline until) {
    auto s = net::socket_stream::view(fd);
    send_error(s, message, until);
}

bool try_send(int fd, const envelope& e, net::deadline until) noexcept {
    auto s = net::socket_stream::view(fd);
    return try_send(s, e, until);
}

bool try_send_error(int fd, const std::string& message, net::deadline until) noexcept {
    auto s = net::socket_stream::view(fd);
    return try_send_error(s, message, until);
}

} // namespace ferry::control
