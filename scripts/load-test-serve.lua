-- wrk script for scripts/load-test-serve.sh: every request POSTs one 784-float instance (values in
-- [0, 1], fixed seed) to /v1/predict; done() prints one JSON line with requests/s, p50/p99 in ms,
-- timeouts and non-2xx answers.
wrk.method = "POST"
wrk.path = "/v1/predict"
wrk.headers["Content-Type"] = "application/json"
math.randomseed(20)
local values = {}
for i = 1, 784 do values[i] = string.format("%.6f", math.random()) end
wrk.body = '{"instances": [[' .. table.concat(values, ", ") .. ']]}'

function done(summary, latency, requests)
  local seconds = summary.duration / 1e6
  io.write(string.format(
    '{"requests": %d, "requests_per_s": %.1f, "p50_ms": %.3f, "p99_ms": %.3f, "timeouts": %d, "non_2xx": %d, "connect_errors": %d, "read_errors": %d}\n',
    summary.requests, summary.requests / seconds, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.timeout, summary.errors.status, summary.errors.connect, summary.errors.read))
end
