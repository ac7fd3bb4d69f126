#include "common/guard.h"

#include <exception>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/log.h"

namespace knap {

std::string currentExceptionText() {
  try {
    throw;
  } catch (const nlohmann::json::exception& e) {
    return std::string("nlohmann::json exception: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  } catch (...) {
    return "unknown exception";
  }
}

bool runGuarded(std::string_view what, const std::function<void()>& fn) noexcept {
  try {
    fn();
    return true;
  } catch (...) {
    try {
      LOG(ERROR) << what << ": " << currentExceptionText()
                 << " (caught at the thread entry; knapd carries on)";
    } catch (...) {
    }
    return false;
  }
}

void runRestarting(std::string_view what, const std::function<void()>& loop,
                   std::chrono::milliseconds pause) noexcept {
  while (!runGuarded(what, loop)) {
    try {
      LOG(ERROR) << what << ": restarting in " << pause.count() << " ms";
    } catch (...) {
    }
    std::this_thread::sleep_for(pause);
  }
}

Status statusOfThrowing(std::string_view what, const std::function<Status()>& fn) noexcept {
  try {
    return fn();
  } catch (...) {
    std::string text;
    try {
      text = currentExceptionText();
      LOG(ERROR) << what << ": " << text;
    } catch (...) {
    }
    return internalError(std::string(what) + ": " + text);
  }
}

}  // namespace knap
