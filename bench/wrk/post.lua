-- One JSON-RPC eth_blockNumber call per request, the gateway's most common call.
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}'
wrk.headers["Content-Type"] = "application/json"
-- WRK_AUTHORIZATION: the token as a Bearer header instead of in the path (bench/compare-gateway.ts, VIA=bearer).
local authorization = os.getenv("WRK_AUTHORIZATION")
if authorization then wrk.headers["Authorization"] = authorization end
