// One direction of TLS 1.3 record protection (RFC 8446 section 5.2), with
// the traffic key, IV and sequence number of a session GnuTLS negotiated
// (gnutls_record_get_state): what the kernel's TLS does once a library hands
// it the keys. The records are the ones GnuTLS would write and read; they
// only skip its record layer, which copies every record twice on receipt and
// sends each in its own syscall. Here a record opens straight into the
// reader's buffer and seals straight from the writer's.
//
// AES-GCM only (what Ferry negotiates first); a session on another cipher
// keeps GnuTLS's record layer (tls_stream asks `supported`). The cipher
// itself is gcm_engine's: libipsec-mb where it can, GnuTLS's otherwise.
#pragma once

#include "tls/gcm_engine.hpp"

#include <gnutls/gnutls.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace ferry::tls {

namespace record {
inline constexpr size_t header_size = 5, tag_size = 16;
inline constexpr size_t max_content = 16384;                                   // 2^14
inline constexpr size_t max_ciphertext = max_content + 256;                    // RFC 8446
inline constexpr size_t max_sealed = header_size + max_content + 1 + tag_size; // what seal writes
inline constexpr uint8_t application_data = 23, alert = 21, handshake = 22;
} // namespace record

class record_cipher {
  public:
    // The session's current state for one direction (`read` true: what the
    // peer sends); nullopt when its cipher is not AES-GCM or it is not TLS 1.3.
    static std::optional<record_cipher>
    take(gnutls_session_t s, bool read,
         gcm_engine::implementation which = gcm_engine::implementation::fastest);
    record_cipher(record_cipher&& o) noexcept = default;
    record_cipher(const record_cipher&) = delete;
    record_cipher& operator=(const record_cipher&) = delete;
    record_cipher& operator=(record_cipher&&) = delete;
    ~record_cipher() = default;

    // Which implementation seals and opens: for the logs and the tests.
    [[nodiscard]] const char* engine_name() const noexcept { return _gcm.name(); }

    // Seals `len` (<= max_content) bytes of content of `type` as one record
    // at `out` (room for max_sealed): header, ciphertext, tag. Returns the
    // record's size. Throws ferry::error if the key is used up.
    size_t seal(const std::byte* content, size_t len, uint8_t type, std::byte* out);

    struct opened {
        size_t content = 0;  // bytes of content
        uint8_t type = 0;    // the record's true content type; 0 if it had none
        size_t in_spill = 0; // of which the last in_spill are in `spill`, from its start
    };
    // Opens the record `rec` (header included, complete). Its content goes
    // to `dst`, which has room for `room` bytes. When room is short, dst gets
    // nothing and the whole content goes to `spill` (room max_ciphertext);
    // a content's last few bytes (< 16) may go to spill even so. Returns
    // nullopt when the record fails authentication: nothing of it is
    // content then.
    std::optional<opened> open(const std::byte* rec, size_t rec_len, std::byte* dst, size_t room,
                               std::byte* spill);

    // The length a record announces in its header, and whether the header
    // is one TLS 1.3 sends after the handshake (application_data, 0x0303,
    // a length in bounds).
    static size_t length_of(const std::byte* header) noexcept;
    static bool plausible(const std::byte* header) noexcept;

  private:
    record_cipher(gcm_engine gcm, const gnutls_datum_t& iv, uint64_t seq) noexcept;
    void next_nonce(uint8_t nonce[12]);

    gcm_engine _gcm;
    uint8_t _iv[12] = {};
    uint64_t _seq = 0;
};

} // namespace ferry::tls
