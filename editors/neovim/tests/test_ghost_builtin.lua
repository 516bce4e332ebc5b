local T = require("harness")
require("ghost_cases")("builtin")

T.test(":MemoSight restart starts a new server", function()
  local memosight = require("memosight")
  local old = assert(require("memosight.client").get(0)).id
  vim.cmd("stopinsert")
  vim.cmd("MemoSight restart")
  T.wait_for("a new client", function()
    local c = require("memosight.client").get(0)
    return c and c.id ~= old and c.initialized
  end, 20000)
  T.wait_for("status ready", function()
    return memosight.status().state == "ready"
  end, 30000)
end)

T.run(120000)
