// `migrator status` and `migrator abort ID`: the migrations in flight on this
// host (lib/migration_record.hpp), and ending one safely from another
// terminal, even after its migrator is gone.
#pragma once

#include <chrono>
#include <string>

namespace ferry::migrator {

// Prints every migration in flight (phase, ages, pids); 0.
int run_status(bool json);

// Ends migration `id` (or an unambiguous prefix) before its commit: its
// migrator is asked to abort (SIGTERM), which it does within its deadlines;
// if the migrator is gone or does not finish within `wait`, CRIU is killed
// and the workload released here. Refused after the commit. 0 if the
// workload runs afterwards.
int run_abort(const std::string& id, std::chrono::seconds wait, bool json);

} // namespace ferry::migrator
