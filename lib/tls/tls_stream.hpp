// TLS 1.3 over a socket (GnuTLS), with mutual authentication by the cluster
// CA: every connection between Ferry's processes that crosses a network.
//
// A client accepts a server whose certificate the CA signed and whose
// subject alternative name holds the address it dialled; dialling loopback,
// the server must be this host itself (the same identity). A server accepts
// a client whose certificate the CA signed and that its peer_policy allows.
// Nothing is read from a peer before its handshake completes.
#pragma once

#include "core/mapping.hpp"
#include "core/unique_fd.hpp"
#include "sys/net.hpp"
#include "sys/stream.hpp"
#include "tls/credentials.hpp"
#include "tls/record_cipher.hpp"

#include <gnutls/gnutls.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace ferry::tls {

class tls_stream final : public net::stream {
  public:
    enum class role : uint8_t { client, server };
    tls_stream(unique_fd fd, credentials_ptr creds, role r);
    tls_stream(const tls_stream&) = delete;
    tls_stream& operator=(const tls_stream&) = delete;
    ~tls_stream() override;

    [[nodiscard]] int fd() const noexcept override { return _fd.get(); }
    ssize_t read_some(std::byte* dst, size_t len) override;
    ssize_t write_some(const iovec* iov, int iovcnt) override;
    [[nodiscard]] bool buffered() const noexcept override;
    [[nodiscard]] const std::string& peer_identity() const noexcept override { return _peer; }
    [[nodiscard]] bool encrypted() const noexcept override { return true; }
    [[nodiscard]] bool never_blocks() const noexcept override { return true; }
    bool time_receipts() noexcept override;
    [[nodiscard]] uint64_t last_receipt_ns() const noexcept override { return _receipt_ns; }

    // `peer` names the other end in errors (its address).
    void handshake(const std::string& peer, net::deadline until);
    [[nodiscard]] gnutls_session_t session() const noexcept { return _s; }
    // Records are sealed and opened by Ferry's record layer (record_cipher),
    // not GnuTLS's: true after a handshake on AES-GCM.
    [[nodiscard]] bool records_by_ferry() const noexcept { return _reader.has_value(); }

    // Ends TLS in both directions (close_notify each way, then a plaintext
    // byte from the server) and returns the socket, on which both ends go on
    // in plaintext: --insecure-plaintext-pages after an authenticated
    // handshake. Both ends call it at the same point of their protocol. The
    // socket is a duplicate: shutdown() here still ends it.
    unique_fd to_plaintext(net::deadline until);

  private:
    void wait(net::deadline until, const char* what);
    template <typename Call>
    ssize_t record_result(Call call, const char* what);
    // After the handshake, records go through record_cipher (when the
    // session's cipher allows) instead of GnuTLS's record layer.
    void take_records();
    ssize_t read_records(std::byte* dst, size_t len);
    ssize_t receive_more();
    void take_alert(size_t content, const std::byte* a);
    ssize_t write_records(const iovec* iov, int iovcnt);
    size_t take_spill(std::byte* dst, size_t len) noexcept;
    bool record_waiting() const noexcept;
    void seal_batch(const iovec* iov, int iovcnt);
    void send_close_notify(net::deadline until);
    // GnuTLS's transport: it asks for a record's header, then its body; one
    // recv() fills a buffer that serves many records.
    static ssize_t pull(gnutls_transport_ptr_t self, void* dst, size_t len);
    static int pull_timeout(gnutls_transport_ptr_t self, unsigned ms);

    unique_fd _fd;
    bool _timed = false;      // receipts stamped by the kernel (time_receipts)
    uint64_t _receipt_ns = 0; // of the latest read's bytes, when _timed
    credentials_ptr _creds;
    role _role;
    gnutls_session_t _s = nullptr;
    std::string _peer;                    // authenticated identity, once the handshake is done
    std::string _peer_label;              // what errors call the peer
    std::unique_ptr<std::byte[]> _gather; // small writes become one record
    // Received, not yet taken by GnuTLS. Mapped, not malloc'd: a peer that
    // never gets past its handshake costs the pages it touched, and they go
    // back to the system with the connection.
    mapping _in;
    size_t _in_pos = 0, _in_len = 0;

    // Ferry's own record layer, once the handshake is done.
    std::optional<record_cipher> _reader, _writer;
    bool _peer_closed = false;           // close_notify came
    unsigned _empty_records = 0;         // in a row
    std::unique_ptr<std::byte[]> _spill; // content that did not fit the reader's buffer
    size_t _spill_pos = 0, _spill_len = 0;
    mapping _out; // sealed records on their way to the socket
    size_t _out_pos = 0, _out_len = 0;
    size_t _out_taken = 0; // writer's bytes they hold
};

// to_plaintext on a stream known only as a net::stream, as a plain stream
// over the same socket; throws ferry::error if it is not TLS.
std::unique_ptr<net::stream> leave_tls(net::stream& s, net::deadline until);

// Dials `ep` and completes the client handshake within `timeout`.
std::unique_ptr<tls_stream> connect(const net::endpoint& ep, const credentials_ptr& creds,
                                    std::chrono::milliseconds timeout);
// The server handshake on a server-role stream over an accepted socket,
// within `until`; throws for a peer the CA did not sign or the policy does
// not allow.
void authenticate_client(tls_stream& s, const peer_policy& policy, net::deadline until);

} // namespace ferry::tls
