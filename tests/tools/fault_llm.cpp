// keel-fault-llm: a fault-injecting OpenAI/Anthropic-compatible LLM server
// (libtools/include/keel/tools/fault_llm_server.hpp, whose top comment
// documents the fault SPECs and the `[[fault:SPEC]]` directives requests may
// carry).
//
//   keel-fault-llm [--port N] [--mode SPEC] [--sequence SPEC,SPEC,...]
//                  [--tls CERT_FILE]
//
//   --port N         port on 127.0.0.1 (default 0: any free one)
//   --mode SPEC      what requests get by default (default: ok)
//   --sequence LIST  what the first requests get, one SPEC each, before the
//                    default (e.g. `503,503,ok`: two failures, then success)
//   --tls CERT_FILE  serve https with a fresh self-signed certificate for
//                    localhost and 127.0.0.1, written to CERT_FILE (PEM) for
//                    clients to trust (`ca_file`)
//
// Prints `keel-fault-llm: listening on 127.0.0.1:PORT` on stdout once ready,
// serves until SIGINT or SIGTERM, then prints its counters on stderr.

#include <csignal>
#include <fstream>
#include <iostream>
#include <string>

#include "keel/tools/fault_llm_server.hpp"

namespace {

int usage(const std::string& error) {
  std::cerr << "keel-fault-llm: " << error
            << "\nusage: keel-fault-llm [--port N] [--mode SPEC] "
               "[--sequence SPEC,SPEC,...] [--tls CERT_FILE]\n";
  return 2;
}

/// Reads the command line into `opts` and `cert_file`; returns the usage
/// error, if any.
std::string parse_args(int argc, char** argv,
                       keel::fault_llm::fault_llm_server::options& opts,
                       std::string& cert_file) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc)
      return "missing value for " + arg;
    std::string value = argv[++i];
    std::string error;
    if (arg == "--port") {
      if (value.empty() || value.size() > 5
          || value.find_first_not_of("0123456789") != std::string::npos
          || std::stoul(value) > 65535)
        return "--port needs a number in 0..65535";
      opts.port = static_cast<uint16_t>(std::stoul(value));
    } else if (arg == "--mode") {
      auto f = keel::fault_llm::parse_fault(value, &error);
      if (!f)
        return error;
      opts.fallback = std::move(*f);
    } else if (arg == "--sequence") {
      auto seq = keel::fault_llm::parse_fault_sequence(value, &error);
      if (!seq)
        return error;
      opts.script = std::move(*seq);
    } else if (arg == "--tls") {
      cert_file = value;
    } else {
      return "unknown option " + arg;
    }
  }
  return {};
}

} // namespace

int main(int argc, char** argv) {
  using keel::fault_llm::fault_llm_server;
  fault_llm_server::options opts;
  std::string cert_file;
  if (auto error = parse_args(argc, argv, opts, cert_file); !error.empty())
    return usage(error);
  // Block the stop signals in every thread; main waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  try {
    if (!cert_file.empty()) {
      auto identity = keel::fault_llm::make_self_signed_identity();
      std::ofstream out{cert_file};
      out << identity.cert_pem;
      if (!out.flush())
        return usage("cannot write " + cert_file);
      opts.tls = std::move(identity);
    }
    fault_llm_server server{std::move(opts)};
    std::cout << "keel-fault-llm: listening on 127.0.0.1:" << server.port()
              << std::endl;
    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::cerr << "keel-fault-llm: " << server.requests() << " requests, "
              << server.connections() << " connections, at most "
              << server.max_in_flight() << " in flight\n";
  } catch (const std::exception& e) {
    std::cerr << "keel-fault-llm: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
