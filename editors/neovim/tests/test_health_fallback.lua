-- :checkhealth memosight and status() while the embedded model serves because no code model was
-- found (the pytest wrapper turns discovery off): both say so, with the one action that fixes it.
local T = require("harness")

local NOTICE = "embedded fallback: no code model found"

T.test("status and checkhealth say embedded fallback, with the fix", function()
  local cmd, settings = T.server() -- no model given: model.path is "auto"
  require("memosight").setup({ cmd = cmd, settings = settings, root_markers = { "pyproject.toml" } })
  vim.cmd.edit(T.fixture("sample.py"))
  local status = T.wait_for("status ready", function()
    local current = require("memosight").status()
    return current.state == "ready" and current
  end, 60000)
  T.eq(NOTICE, status.notice, "status().notice")
  T.truthy(status.fix and status.fix:find("hf download", 1, true), "status().fix names the command")
  vim.cmd("checkhealth memosight")
  local text = T.wait_for("health report", function()
    local joined = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
    return joined:find("Running server", 1, true) and joined
  end, 90000)
  T.log(text)
  T.truthy(text:find("WARNING " .. NOTICE, 1, true), "a warning says embedded fallback")
  T.truthy(text:find("hf download", 1, true), "the report names the fix")
  T.truthy(text:find("status: ready", 1, true), "the running server is reported")
  T.eq(nil, text:find("ERROR", 1, true), "no errors in the report")
end)

T.run(150000)
