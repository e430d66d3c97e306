#include "tls/tls_stream.hpp"

#include "core/error.hpp"
#include "sys/receipt_time.hpp"
#include "tls/gnutls_error.hpp"
#include "tls/x509.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>

#include <cstring>

namespace ferry::tls {

namespace {

// TLS 1.3 only; AES-GCM first (AES-NI), ChaCha20 for hosts without it.
constexpr const char* priorities =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305";
constexpr size_t max_record = 16384;
constexpr size_t receive_buffer = 256 << 10;
// Records sealed per send(): one syscall carries up to 256 KiB of content.
constexpr size_t records_per_send = 16;
constexpr unsigned max_empty_records = 32;
// Writer's pieces under this size are gathered into one record (a header and
// its checksums); larger ones are sealed straight from the writer's buffer.
constexpr size_t small_piece = 4096;

std::string verify_failure(gnutls_session_t s) {
    const unsigned status = gnutls_session_get_verify_cert_status(s);
    gnutls_datum_t out{};
    if (status && gnutls_certificate_verification_status_print(
                      status, gnutls_certificate_type_get(s), &out, 0) == 0) {
        std::string text(reinterpret_cast<const char*>(out.data), out.size);
        gnutls_free(out.data);
        return text;
    }
    return "certificate verification failed";
}

std::string peer_address(int fd) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len))
        return "an unknown peer";
    char ip[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (ss.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        port = ntohs(a->sin6_port);
    } else {
        return "a local peer";
    }
    return fmt::format("{}:{}", ip, port);
}

bool is_loopback(const net::endpoint& ep) {
    return (ntohl(ep.addr.sin_addr.s_addr) >> 24) == 127;
}

} // namespace

tls_stream::tls_stream(unique_fd fd, credentials_ptr creds, role r)
    : _fd(std::move(fd)), _creds(std::move(creds)), _role(r),
      _gather(std::make_unique<std::byte[]>(max_record)),
      _in(mapping::anonymous(receive_buffer, "TLS receive buffer")) {
    net::set_nonblocking(_fd.get(), true); // every wait is ours, with a deadline
    check(gnutls_init(&_s, (r == role::client ? GNUTLS_CLIENT : GNUTLS_SERVER) | GNUTLS_NONBLOCK |
                               GNUTLS_NO_TICKETS),
          "TLS session");
    const char* err_pos = nullptr;
    check(gnutls_priority_set_direct(_s, priorities, &err_pos), "TLS priorities");
    check(gnutls_credentials_set(_s, GNUTLS_CRD_CERTIFICATE, _creds->get()), "TLS credentials");
    if (r == role::server)
        gnutls_certificate_server_set_request(_s, GNUTLS_CERT_REQUIRE);
    // Receiving through our buffer; sending straight to the socket.
    gnutls_transport_set_ptr2(_s, this,
                              reinterpret_cast<gnutls_transport_ptr_t>(intptr_t(_fd.get())));
    gnutls_transport_set_pull_function(_s, &tls_stream::pull);
    gnutls_transport_set_pull_timeout_function(_s, &tls_stream::pull_timeout);
    gnutls_handshake_set_timeout(_s, 0); // bounded by our own deadline
}

tls_stream::~tls_stream() {
    if (_s)
        gnutls_deinit(_s);
}

// Receives what the socket has behind the bytes not yet taken, which move to
// the front first (at most one partial record). recv()'s result.
ssize_t tls_stream::receive_more() {
    if (_in_pos > 0) {
        std::memmove(_in.data(), _in.data() + _in_pos, _in_len - _in_pos);
        _in_len -= _in_pos;
        _in_pos = 0;
    }
    ssize_t n;
    if (_timed)
        n = net::recv_timed(_fd.get(), _in.data() + _in_len, _in.size() - _in_len, _receipt_ns);
    else
        do
            n = ::recv(_fd.get(), _in.data() + _in_len, _in.size() - _in_len, 0);
        while (n < 0 && errno == EINTR);
    if (n > 0)
        _in_len += size_t(n);
    return n;
}

bool tls_stream::time_receipts() noexcept {
    _timed = net::time_receipts(_fd.get());
    return _timed;
}

ssize_t tls_stream::pull(gnutls_transport_ptr_t self, void* dst, size_t len) {
    auto& s = *static_cast<tls_stream*>(self);
    if (s._in_pos == s._in_len) {
        const ssize_t n = s.receive_more();
        if (n <= 0) {
            if (n < 0)
                gnutls_transport_set_errno(s._s, errno);
            return n;
        }
    }
    const size_t take = std::min(len, s._in_len - s._in_pos);
    std::memcpy(dst, s._in.data() + s._in_pos, take);
    s._in_pos += take;
    return ssize_t(take);
}

int tls_stream::pull_timeout(gnutls_transport_ptr_t self, unsigned ms) {
    auto& s = *static_cast<tls_stream*>(self);
    if (s._in_pos < s._in_len)
        return 1;
    pollfd p{s._fd.get(), POLLIN, 0};
    const int r = ::poll(&p, 1, ms == GNUTLS_INDEFINITE_TIMEOUT ? -1 : int(ms));
    if (r < 0)
        gnutls_transport_set_errno(s._s, errno);
    return r;
}

void tls_stream::wait(net::deadline until, const char* what) {
    const short ev = gnutls_record_get_direction(_s) ? POLLOUT : POLLIN;
    if (!net::wait_fd(_fd.get(), ev, until))
        throw error(fmt::format("{} with {} timed out", what, _peer_label));
}

void tls_stream::handshake(const std::string& peer, net::deadline until) {
    _peer_label = peer;
    for (;;) {
        const int rc = gnutls_handshake(_s);
        if (rc == GNUTLS_E_SUCCESS)
            break;
        if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED) {
            wait(until, "TLS handshake");
            continue;
        }
        if (!gnutls_error_is_fatal(rc))
            continue;
        if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR)
            throw error(
                fmt::format("TLS authentication of {} failed: {}", peer, verify_failure(_s)));
        throw error(fmt::format("TLS handshake with {} failed: {}", peer, gnutls_strerror(rc)));
    }
    unsigned n = 0;
    const gnutls_datum_t* chain = gnutls_certificate_get_peers(_s, &n);
    if (!chain || n == 0)
        throw error(fmt::format("TLS authentication of {} failed: no certificate", peer));
    _peer = common_name(import_der(chain[0]).get());
    if (_peer.empty())
        throw error(
            fmt::format("TLS authentication of {} failed: its certificate has no name", peer));
    take_records();
}

// GnuTLS pulls exactly the records it needs, so after the handshake every
// byte it has not taken is still in _in, and the records go on from there.
void tls_stream::take_records() {
    if (gnutls_record_check_pending(_s) > 0)
        return; // data GnuTLS already decrypted: stay with its record layer
    auto reader = record_cipher::take(_s, true);
    auto writer = record_cipher::take(_s, false);
    if (!reader || !writer)
        return;
    _spill = std::make_unique<std::byte[]>(record::max_ciphertext);
    _out = mapping::anonymous(records_per_send * record::max_sealed, "TLS send buffer");
    _reader.emplace(std::move(*reader));
    _writer.emplace(std::move(*writer));
}

// A record call's result as a stream reports it: bytes, 0 at the end, or -1
// when it would block.
template <typename Call>
ssize_t tls_stream::record_result(Call call, const char* what) {
    for (;;) {
        const ssize_t n = call();
        if (n >= 0)
            return n;
        if (n == GNUTLS_E_INTERRUPTED)
            continue;
        if (n == GNUTLS_E_AGAIN)
            return -1;
        // A peer that closes without close_notify: the framing above sees
        // whether a message was cut short.
        if (n == GNUTLS_E_PREMATURE_TERMINATION)
            return 0;
        throw error(fmt::format("TLS {} {}: {}", what, _peer_label, gnutls_strerror(int(n))));
    }
}

ssize_t tls_stream::read_some(std::byte* dst, size_t len) {
    if (_reader)
        return read_records(dst, len);
    return record_result([&] { return gnutls_record_recv(_s, dst, len); }, "receive from");
}

// Up to one record per call. Small pieces (a header, then its checksums) are
// gathered into one record; a large first piece goes as it is. After -1 the
// caller passes the same buffers, so the same bytes are gathered again, as
// GnuTLS requires of a retried send.
ssize_t tls_stream::write_some(const iovec* iov, int iovcnt) {
    if (_writer)
        return write_records(iov, iovcnt);
    const void* data = iov[0].iov_base;
    size_t len = iov[0].iov_len;
    if (len < max_record && iovcnt > 1) {
        len = 0;
        for (int i = 0; i < iovcnt && len < max_record; i++) {
            const size_t take = std::min(iov[i].iov_len, max_record - len);
            std::memcpy(_gather.get() + len, iov[i].iov_base, take);
            len += take;
        }
        data = _gather.get();
    }
    return record_result([&] { return gnutls_record_send(_s, data, std::min(len, max_record)); },
                         "send to");
}

bool tls_stream::buffered() const noexcept {
    if (_reader)
        return record_waiting();
    return _in_pos < _in_len || gnutls_record_check_pending(_s) > 0;
}

size_t tls_stream::take_spill(std::byte* dst, size_t len) noexcept {
    const size_t n = std::min(len, _spill_len - _spill_pos);
    std::memcpy(dst, _spill.get() + _spill_pos, n);
    _spill_pos += n;
    if (_spill_pos == _spill_len)
        _spill_pos = _spill_len = 0;
    return n;
}

// Content to hand out, or a whole record to open, without touching the
// socket.
bool tls_stream::record_waiting() const noexcept {
    if (_spill_pos < _spill_len || _peer_closed)
        return true;
    const size_t avail = _in_len - _in_pos;
    return avail >= record::header_size &&
           (!record_cipher::plausible(_in.data() + _in_pos) || // read_some reports it
            avail >= record::header_size + record_cipher::length_of(_in.data() + _in_pos));
}

// Opens every whole record already received into dst, receiving more only
// when none is: one recv() serves many records, and each opens straight
// into dst unless dst is too short for it.
ssize_t tls_stream::read_records(std::byte* dst, size_t len) {
    size_t got = take_spill(dst, len);
    for (;;) {
        while (got < len && !_peer_closed) {
            const size_t avail = _in_len - _in_pos;
            if (avail < record::header_size)
                break;
            const std::byte* rec = _in.data() + _in_pos;
            if (!record_cipher::plausible(rec))
                throw error(fmt::format("TLS record from {} is malformed", _peer_label));
            const size_t rec_len = record::header_size + record_cipher::length_of(rec);
            if (avail < rec_len)
                break;
            const auto r = _reader->open(rec, rec_len, dst + got, len - got, _spill.get());
            if (!r)
                throw error(fmt::format("TLS record from {} failed authentication", _peer_label));
            _in_pos += rec_len;
            if (r->type == record::alert) {
                take_alert(r->content, r->in_spill ? _spill.get() : dst + got);
                break; // close_notify: the end
            }
            if (r->type != record::application_data)
                throw error(fmt::format("TLS record of type {} from {} is not application data",
                                        r->type, _peer_label));
            // Empty records are legal, but a stream of them is a peer keeping
            // this loop busy (GnuTLS stops them too).
            if (r->content == 0 && ++_empty_records > max_empty_records)
                throw error(fmt::format("{} sends only empty TLS records", _peer_label));
            if (r->content)
                _empty_records = 0;
            got += r->content - r->in_spill;
            _spill_len = r->in_spill;
            got += take_spill(dst + got, len - got);
        }
        if (got == len || _peer_closed)
            return ssize_t(got);
        // Whatever the socket has, as a read() would.
        const ssize_t n = receive_more();
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return got ? ssize_t(got) : -1;
        if (n < 0)
            throw sys_error(fmt::format("receive from {}", _peer_label));
        if (n == 0) // closed without close_notify: the framing above sees a cut message
            return ssize_t(got);
    }
}

// An alert's `content` bytes at `a`: close_notify ends the stream (nothing
// of it is content); any other alert fails it.
void tls_stream::take_alert(size_t content, const std::byte* a) {
    if (content == 2 && a[1] == std::byte{GNUTLS_A_CLOSE_NOTIFY}) {
        _spill_pos = _spill_len = 0;
        _peer_closed = true;
        return;
    }
    throw error(fmt::format(
        "TLS alert from {}: {}", _peer_label,
        content == 2 ? gnutls_alert_get_strname(gnutls_alert_description_t(a[1])) : "malformed"));
}

// Seals the writer's buffers, up to records_per_send records, into _out.
void tls_stream::seal_batch(const iovec* iov, int iovcnt) {
    _out_pos = _out_len = _out_taken = 0;
    int i = 0;
    size_t off = 0; // into iov[i]
    auto skip_empty = [&] {
        while (i < iovcnt && off == iov[i].iov_len) {
            i++;
            off = 0;
        }
    };
    skip_empty();
    while (i < iovcnt && _out_len + record::max_sealed <= _out.size()) {
        const auto* base = static_cast<const std::byte*>(iov[i].iov_base);
        size_t n = std::min(iov[i].iov_len - off, record::max_content);
        if (n < small_piece && i + 1 < iovcnt) {
            // Small pieces go together into one record; a large one after
            // them gets records of its own, sealed from where it is.
            n = 0;
            while (i < iovcnt && iov[i].iov_len - off < small_piece &&
                   n + iov[i].iov_len - off <= record::max_content) {
                std::memcpy(_gather.get() + n, static_cast<const std::byte*>(iov[i].iov_base) + off,
                            iov[i].iov_len - off);
                n += iov[i].iov_len - off;
                off = iov[i].iov_len;
                skip_empty();
            }
            _out_len +=
                _writer->seal(_gather.get(), n, record::application_data, _out.data() + _out_len);
        } else {
            _out_len +=
                _writer->seal(base + off, n, record::application_data, _out.data() + _out_len);
            off += n;
            skip_empty();
        }
        _out_taken += n;
    }
}

// All of a batch reaches the socket before the writer hears it was taken:
// after -1 the same call comes again and sends the rest.
ssize_t tls_stream::write_records(const iovec* iov, int iovcnt) {
    if (_out_pos == _out_len)
        seal_batch(iov, iovcnt);
    while (_out_pos < _out_len) {
        const ssize_t n =
            ::send(_fd.get(), _out.data() + _out_pos, _out_len - _out_pos, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return -1;
        if (n < 0)
            throw sys_error(fmt::format("send to {}", _peer_label));
        _out_pos += size_t(n);
    }
    return ssize_t(std::exchange(_out_taken, 0));
}

void tls_stream::send_close_notify(net::deadline until) {
    const std::byte alert[2] = {std::byte{1}, std::byte{GNUTLS_A_CLOSE_NOTIFY}}; // warning
    if (_out_pos != _out_len)
        throw error(fmt::format("TLS close with {} while a write is unfinished", _peer_label));
    _out_pos = _out_taken = 0;
    _out_len = _writer->seal(alert, sizeof alert, record::alert, _out.data());
    while (write_records(nullptr, 0) < 0)
        if (!net::wait_fd(_fd.get(), POLLOUT, until))
            throw error(fmt::format("TLS close with {} timed out", _peer_label));
}

unique_fd tls_stream::to_plaintext(net::deadline until) {
    auto send_close = [&] {
        if (_writer)
            return send_close_notify(until);
        for (;;) {
            const int rc = gnutls_bye(_s, GNUTLS_SHUT_WR);
            if (rc == GNUTLS_E_SUCCESS)
                return;
            if (rc != GNUTLS_E_AGAIN && rc != GNUTLS_E_INTERRUPTED)
                check(rc, "TLS close_notify");
            wait(until, "TLS close");
        }
    };
    auto await_close = [&] {
        std::byte b;
        for (;;) {
            const ssize_t n = read_some(&b, 1);
            if (n == 0)
                return;
            if (n > 0)
                throw error(fmt::format("{} sent data while leaving TLS", _peer_label));
            if (!net::wait_fd(_fd.get(), POLLIN, until))
                throw error(fmt::format("leaving TLS with {} timed out", _peer_label));
        }
    };
    // The server's last byte is sent in plaintext only after the client's
    // close_notify arrived: no TLS read can take plaintext bytes with it.
    std::byte go{'P'};
    if (_role == role::server) {
        send_close();
        await_close();
        net::write_full(_fd.get(), {&go, 1}, until, "leave TLS");
    } else {
        await_close();
        send_close();
        if (!net::read_full(_fd.get(), {&go, 1}, until, "leave TLS") || go != std::byte{'P'})
            throw error(fmt::format("{} did not leave TLS", _peer_label));
    }
    if (_in_pos != _in_len || _spill_pos != _spill_len) // the protocol above makes this impossible
        throw error(fmt::format("{} sent plaintext before leaving TLS", _peer_label));
    unique_fd plain(::fcntl(_fd.get(), F_DUPFD_CLOEXEC, 0));
    if (!plain)
        throw sys_error("dup the page channel's socket");
    return plain;
}

std::unique_ptr<net::stream> leave_tls(net::stream& s, net::deadline until) {
    auto* t = dynamic_cast<tls_stream*>(&s);
    if (!t)
        throw error("cannot leave TLS on a connection that is not TLS");
    return std::make_unique<net::socket_stream>(t->to_plaintext(until));
}

std::unique_ptr<tls_stream> connect(const net::endpoint& ep, const credentials_ptr& creds,
                                    std::chrono::milliseconds timeout) {
    const auto until = net::after(timeout);
    auto s = std::make_unique<tls_stream>(net::tcp_connect(ep, timeout), creds,
                                          tls_stream::role::client);
    const std::string label = ep.to_string();
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &ep.addr.sin_addr, ip, sizeof ip);
    // Loopback is this host: its daemon presents this host's own identity.
    gnutls_session_set_verify_cert(s->session(), is_loopback(ep) ? nullptr : ip, 0);
    s->handshake(label, until);
    if (is_loopback(ep) && s->peer_identity() != creds->identity())
        throw error(fmt::format("TLS authentication of {} failed: it is {}, not this host ({})",
                                label, s->peer_identity(), creds->identity()));
    return s;
}

void authenticate_client(tls_stream& s, const peer_policy& policy, net::deadline until) {
    const std::string label = peer_address(s.fd());
    gnutls_session_set_verify_cert(s.session(), nullptr, 0);
    s.handshake(label, until);
    if (!policy.allows(s.peer_identity()))
        throw error(fmt::format("{} ({}) is not allowed by this daemon's peer policy", label,
                                s.peer_identity()));
}

} // namespace ferry::tls
