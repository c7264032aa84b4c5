-- wrk's side of one load cell (bench/load.ts starts it and reads what done() prints).
--   mint:    POST /v1/vouchers, bearer tokens taken in turn from the items file, a fresh Idempotency-Key each;
--   execute: POST /v1/services/execute (BENCH_LOAD_BODY), bearer tokens taken in turn as for mint;
--   capture: POST /v1/redemptions/<id>/capture once per hold id in the items file (split between threads);
--            a thread that has captured its share stops and says so, and load.ts ends the run then.
-- Every 200 answer's hold id is kept, for the ledger check afterwards.
local mode = os.getenv("BENCH_LOAD_MODE")
local items_file = os.getenv("BENCH_LOAD_ITEMS")
local merchant_key = os.getenv("BENCH_LOAD_TOKEN")
local out_dir = os.getenv("BENCH_LOAD_OUT")
local key_prefix = os.getenv("BENCH_LOAD_KEY_PREFIX")
local thread_count = tonumber(os.getenv("BENCH_LOAD_THREADS"))
local mint_body = '{"offerId":"off_bench"}'
local execute_body = os.getenv("BENCH_LOAD_BODY")

local threads = {}
local thread_seq = 0

function setup(thread)
  thread:set("thread_id", thread_seq)
  thread_seq = thread_seq + 1
  table.insert(threads, thread)
end

function init(args)
  items = {}
  local line_no = 0
  for line in io.lines(items_file) do
    if mode == "mint" or line_no % thread_count == thread_id then table.insert(items, line) end
    line_no = line_no + 1
  end
  start = math.floor(thread_id * #items / thread_count)
  -- wrk calls thread 0's request() once before the run, to check what it returns; that request is never sent.
  verifying = thread_id == 0
  sent = 0
  answered = 0
  exhausted = false
  ids = {}
  statuses = {}
  samples = {}
end

local function finish_if_done()
  if exhausted and answered == sent then
    io.stdout:write("exhausted ", thread_id, "\n")
    io.stdout:flush()
    wrk.thread:stop()
  end
end

function request()
  if verifying then
    verifying = false
    return wrk.format("POST", "/v1/vouchers", { ["Content-Type"] = "application/json" }, mint_body)
  end
  if mode == "capture" then
    if sent >= #items then
      exhausted = true
      finish_if_done()
      -- Nothing left to capture: an empty request leaves this connection idle until the run ends.
      return ""
    end
    sent = sent + 1
    return wrk.format("POST", "/v1/redemptions/" .. items[sent] .. "/capture", {
      ["Authorization"] = "Bearer " .. merchant_key,
      ["Content-Type"] = "application/json",
      ["Idempotency-Key"] = key_prefix .. "-" .. thread_id .. "-" .. sent,
    }, "{}")
  end
  sent = sent + 1
  local headers = {
    ["Authorization"] = "Bearer " .. items[(start + sent) % #items + 1],
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = key_prefix .. "-" .. thread_id .. "-" .. sent,
  }
  if mode == "execute" then return wrk.format("POST", "/v1/services/execute", headers, execute_body) end
  return wrk.format("POST", "/v1/vouchers", headers, mint_body)
end

function response(status, headers, body)
  answered = answered + 1
  if status == 200 then
    local id = string.match(body, '"(hold_[a-z2-7]+)"')
    if id then ids[#ids + 1] = id end
  else
    statuses[status] = (statuses[status] or 0) + 1
    if #samples < 3 then samples[#samples + 1] = status .. " " .. string.sub(body, 1, 300) end
  end
  finish_if_done()
end

function done(summary, latency, requests)
  local ids_file = io.open(out_dir .. "/ids", "w")
  local status_file = io.open(out_dir .. "/statuses", "w")
  for _, thread in ipairs(threads) do
    for _, id in ipairs(thread:get("ids")) do ids_file:write(id, "\n") end
    for status, count in pairs(thread:get("statuses")) do status_file:write(status, " ", count, "\n") end
    for _, sample in ipairs(thread:get("samples")) do status_file:write("sample ", (string.gsub(sample, "\n", " ")), "\n") end
  end
  ids_file:close()
  status_file:close()
  local errors = summary.errors
  io.stdout:write(string.format("bench-result %d %d %d %d %d %d\n", summary.duration, summary.requests,
    latency:percentile(50), latency:percentile(99), errors.connect + errors.read + errors.write, errors.timeout))
  io.stdout:flush()
end
