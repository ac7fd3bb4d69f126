// The exception policy's last line (docs/decisions.md "Exceptions"). knap's
// own code returns Status and never throws; exceptions come only from
// third-party calls (nlohmann::json, Boost, the standard library) and are
// caught next to those calls. Whatever still escapes is caught here: every
// thread knapd starts runs its body through runGuarded (one-shot work) or
// runRestarting (a loop, an io_context), and every work item a worker runs
// for an object (a reconcile) goes through statusOfThrowing, so one malformed
// object fails its own item — logged with LOG(ERROR), retried with back-off —
// and never ends the process.
//
// Thread-safe; the functions hold no state.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace knap {

// What the exception in flight is, for a log line: "std::out_of_range: ...",
// "nlohmann::json type_error: [json.exception.type_error.302] ...", or
// "unknown exception". Call only inside a catch block.
std::string currentExceptionText();

// Runs fn. An exception escaping it is logged (LOG(ERROR) naming `what`) and
// swallowed; returns false then, true when fn returned normally.
bool runGuarded(std::string_view what, const std::function<void()>& fn) noexcept;

// Runs `loop` until it returns normally. An exception escaping it is logged
// and the loop started again after `pause` (so a loop that throws at once
// logs at most once per pause). For thread bodies whose loop returns when
// asked to stop, and for io_context::run() (Boost's documented recovery).
void runRestarting(std::string_view what, const std::function<void()>& loop,
                   std::chrono::milliseconds pause = std::chrono::seconds(1)) noexcept;

// fn's Status, or kInternal "<what>: <exception text>" when it throws (also
// logged with LOG(ERROR)).
Status statusOfThrowing(std::string_view what, const std::function<Status()>& fn) noexcept;

}  // namespace knap
