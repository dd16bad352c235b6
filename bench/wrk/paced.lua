-- POST eth_blockNumber at a roughly fixed rate: each connection waits a random 0..2*MEAN_DELAY_MS
-- ms before each request (random, so the connections do not fire in step). With C connections
-- the rate is C * 1000 / (MEAN_DELAY_MS + latency), e.g. 50 connections, 50 ms: ~1,000 req/s.
-- WRK_BODY=varied: eth_getBalance of another address each request instead (see post.lua).
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
wrk.headers["Content-Type"] = "application/json"
local mean = tonumber(os.getenv("MEAN_DELAY_MS") or "50")

function init(args)
  math.randomseed(os.time() + math.floor(os.clock() * 1000000))
end

function delay()
  return math.random(0, 2 * mean)
end

if os.getenv("WRK_BODY") == "varied" then
  local counter = 0
  request = function()
    counter = counter + 1
    return wrk.format(nil, nil, nil, string.format('{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x%040x","latest"]}', counter))
  end
end
