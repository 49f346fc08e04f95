// What spdlog's default logger writes while a LogCapture lives (a test's
// own view of serve's log lines, from any thread). Each test case makes its
// own; the previous default logger comes back when it ends.
#pragma once

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <string>

namespace trainq::testing {

class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<Sink>()), old_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::info);
    logger->set_pattern("%l %v");
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(old_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string text() { return sink_->text(); }
  // How many times `what` occurs in what was logged.
  int Count(const std::string& what) {
    std::string t = text();
    int n = 0;
    for (auto at = t.find(what); at != std::string::npos; at = t.find(what, at + 1)) ++n;
    return n;
  }

 private:
  class Sink : public spdlog::sinks::base_sink<std::mutex> {
   public:
    std::string text() {
      std::lock_guard<std::mutex> lock(mutex_);
      return text_;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
      spdlog::memory_buf_t buf;
      formatter_->format(msg, buf);
      text_.append(buf.data(), buf.size());
    }
    void flush_() override {}

   private:
    std::string text_;
  };
  std::shared_ptr<Sink> sink_;
  std::shared_ptr<spdlog::logger> old_;
};

}  // namespace trainq::testing
