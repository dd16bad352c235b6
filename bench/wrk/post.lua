-- One JSON-RPC call per request. By default eth_blockNumber, the gateway's most common call, the
-- same body from every connection. WRK_BODY=varied: eth_getBalance at `latest` of another address
-- each request (id 1, as the bench upstream answers), so no two calls in flight are identical
-- and the gateway's coalescing merges none: each one takes the proxied path (bench/compare-gateway.ts, BODY=varied).
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
wrk.headers["Content-Type"] = "application/json"
-- WRK_AUTHORIZATION: the token as a Bearer header instead of in the path (bench/compare-gateway.ts, VIA=bearer).
local authorization = os.getenv("WRK_AUTHORIZATION")
if authorization then wrk.headers["Authorization"] = authorization end

if os.getenv("WRK_BODY") == "varied" then
  local counter = 0
  request = function()
    counter = counter + 1
    return wrk.format(nil, nil, nil, string.format('{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x%040x","latest"]}', counter))
  end
end
