-- wrk script for the verification benchmark (Benchmarks/run-verify.sh).
-- usage: wrk -t1 … -s Benchmarks/verify.lua URL -- TOKENS_FILE EXPECT [PATH]
--
-- Sends GET PATH (default /verifyGDAuthToken) with the header X-Good-GD-AuthToken, taking the
-- tokens of TOKENS_FILE (one a line) in turn, round and round. The requests are formatted once,
-- in init, so that wrk spends no time building them. Every answer is checked: EXPECT "100" wants
-- HTTP 200 with X-Good-GD-AuthResponseCode "100 OK" (dcverify), EXPECT "200" wants HTTP 200
-- (nginx's static answer, dcverify's /health); any other answer counts as bad. done() prints one
-- JSON line with the counts and the latency percentiles in microseconds, for the runner to read.

local requests = {}
local index = 0
local expect = "100"
bad = 0 -- a global, so that done() can read it from the thread with thread:get

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  expect = args[2] or "100"
  local path = args[3] or "/verifyGDAuthToken"
  for line in io.lines(args[1]) do
    if #line > 0 then
      requests[#requests + 1] = wrk.format("GET", path, { ["X-Good-GD-AuthToken"] = line })
    end
  end
  assert(#requests > 0, "no tokens in " .. args[1])
end

function request()
  index = index % #requests + 1
  return requests[index]
end

function response(status, headers, body)
  if status ~= 200 or (expect == "100" and headers["X-Good-GD-AuthResponseCode"] ~= "100 OK") then
    bad = bad + 1
  end
end

function done(summary, latency, _)
  local badCount = 0
  for _, thread in ipairs(threads) do
    badCount = badCount + thread:get("bad")
  end
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"bad":%d,' ..
    '"socket_errors":%d,"timeouts":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, badCount, e.connect + e.read + e.write, e.timeout))
end
