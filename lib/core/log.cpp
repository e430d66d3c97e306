#include "core/log.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

namespace ferry {

namespace {

// Under systemd with stderr going to the journal (JOURNAL_STREAM names that
// very stream), a line starts with its syslog priority, "<3>", which the
// journal reads (sd-daemon(3)); it keeps its own timestamps.
bool stderr_is_journal() {
    static const bool is = [] {
        const char* js = std::getenv("JOURNAL_STREAM");
        unsigned long long dev = 0, ino = 0;
        struct stat st {};
        return js && std::sscanf(js, "%llu:%llu", &dev, &ino) == 2 && ::fstat(2, &st) == 0 &&
               st.st_dev == dev && st.st_ino == ino;
    }();
    return is;
}

class syslog_priority final : public spdlog::custom_flag_formatter {
  public:
    void format(const spdlog::details::log_msg& msg, const std::tm&,
                spdlog::memory_buf_t& dest) override {
        // trace, debug, info, warn, err, critical, off
        static constexpr const char* prefix[] = {"<7>", "<7>", "<6>", "<4>", "<3>", "<2>", "<6>"};
        const char* p = prefix[size_t(msg.level) < 7 ? size_t(msg.level) : 6];
        dest.append(p, p + 3);
    }
    [[nodiscard]] std::unique_ptr<custom_flag_formatter> clone() const override {
        return std::make_unique<syslog_priority>();
    }
};

void set_line_format(spdlog::logger& logger, const std::string& message_prefix) {
    if (!stderr_is_journal()) {
        logger.set_pattern("%H:%M:%S.%e %n[%P] %l: " + message_prefix + "%v");
        return;
    }
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<syslog_priority>('*').set_pattern("%*%n[%P] %l: " + message_prefix + "%v");
    logger.set_formatter(std::move(f));
}

} // namespace

std::shared_ptr<spdlog::logger> make_logger(const std::string& component) {
    if (auto existing = spdlog::get(component))
        return existing;
    auto logger = spdlog::stderr_logger_mt(component);
    set_line_format(*logger, "");
    logger->set_level(spdlog::get_level());
    return logger;
}

std::shared_ptr<spdlog::logger> make_logger(const std::string& component,
                                            const std::string& migration_id) {
    // A sink of its own: a pattern belongs to the sink, and the component's
    // logger keeps its own. Each writes whole lines to stderr.
    auto logger = std::make_shared<spdlog::logger>(
        component, std::make_shared<spdlog::sinks::stderr_sink_mt>());
    // The id is hex: nothing in it reads as a pattern flag.
    set_line_format(*logger, "migration " + migration_id + ": ");
    logger->set_level(spdlog::get_level());
    return logger;
}

void configure_logging(const std::string& level) {
    spdlog::set_level(spdlog::level::from_str(level)); // the registry's loggers too
}

} // namespace ferry
