#include "transport/page_holes.hpp"

#include "core/error.hpp"
#include "tls/tls_stream.hpp"
#include "wire/control.hpp"

#include <fmt/format.h>

namespace ferry {

page_holes_answer fetch_page_holes(const net::endpoint& source, const tls::credentials_ptr& creds,
                                   const std::string& migration_id,
                                   std::chrono::milliseconds connect_timeout,
                                   std::chrono::milliseconds wait,
                                   const std::function<bool()>& ready_to_ask,
                                   const std::function<void(std::vector<page_hole>)>& holes,
                                   const std::function<void(net::stream*)>& connection) {
    auto conn = tls::connect(source, creds, connect_timeout);
    // Declared after conn: withdrawn before conn closes.
    struct handed_out {
        const std::function<void(net::stream*)>& to;
        ~handed_out() {
            if (to)
                to(nullptr);
        }
    } handed{connection};
    if (connection)
        connection(conn.get());
    FerryControl__PageChannelOpen open = FERRY_CONTROL__PAGE_CHANNEL_OPEN__INIT;
    open.migration_id = const_cast<char*>(migration_id.c_str());
    open.kind = FERRY_CONTROL__CHANNEL_KIND__HOLES;
    control::send_message(*conn, open, net::after(connect_timeout));
    page_holes_answer answer;
    std::vector<page_hole> part;
    auto until = net::after(std::max(connect_timeout, wait));
    for (;;) {
        auto frame = control::receive(*conn, until);
        control::expect(frame.get(), FERRY_CONTROL__ENVELOPE__BODY_PAGE_HOLES,
                        "source " + source.to_string());
        const auto& h = *frame->page_holes;
        if (h.n_pid != h.n_start || h.n_pid != h.n_end)
            throw error(fmt::format("source {}: a page_holes frame with {} pids, {} starts and "
                                    "{} ends",
                                    source.to_string(), h.n_pid, h.n_start, h.n_end));
        for (size_t i = 0; i < h.n_pid; i++) {
            const page_hole hole{h.pid[i], h.start[i], h.end[i]};
            if (hole.start >= hole.end || hole.start % 4096 || hole.end % 4096)
                throw error(fmt::format("source {}: malformed hole [{:#x}, {:#x})",
                                        source.to_string(), hole.start, hole.end));
            part.push_back(hole);
        }
        if (h.error)
            answer.unknown = h.error;
        if (h.last) {
            holes(std::move(part));
            return answer;
        }
        if (h.has_rest_on_ask && h.rest_on_ask) {
            holes(std::move(part));
            part.clear();
            if (!ready_to_ask()) {
                answer.unknown = "not asked for the rest: the restore did not finish";
                return answer;
            }
            FerryControl__PageHolesScan scan = FERRY_CONTROL__PAGE_HOLES_SCAN__INIT;
            control::send_message(*conn, scan, net::after(connect_timeout));
            until = net::after(std::max(connect_timeout, wait));
        }
    }
}

} // namespace ferry
