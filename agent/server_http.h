// The HTTP listener of `trainq serve`: cpprestsdk's http_listener behind plain
// structs, so that nothing else includes cpprest headers and the routing
// (agent/server.h) is testable without sockets.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/http_client.h"
#include "core/result.h"

namespace trainq {

struct HttpServerRequest {
  std::string method;  // GET, POST, ...
  std::string path;    // /hooks/github (no query)
  HttpHeaders headers;
  std::string body;
  bool body_too_large = false;  // the body was over the limit and not read
};

struct HttpServerReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

// "127.0.0.1:8080" -> host and port. kInvalidArgument names the flag.
struct ListenAddress {
  std::string host;
  int port = 0;
  bool loopback() const;
};
Result<ListenAddress> ParseListenAddress(const std::string& text);

class HttpListener {
 public:
  using Handler = std::function<HttpServerReply(const HttpServerRequest&)>;
  // Binds and starts serving on cpprest's thread pool; `handler` is called
  // from several threads at once, once the whole body has arrived. A
  // Content-Length over max_body_bytes is answered by the handler with
  // body_too_large set, without reading the body; a body without
  // Content-Length (chunked) is refused with 411.
  static Result<std::unique_ptr<HttpListener>> Start(const ListenAddress& address,
                                                     std::size_t max_body_bytes, Handler handler);
  ~HttpListener();  // stops
  void Stop();

 private:
  struct Impl;
  explicit HttpListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainq
