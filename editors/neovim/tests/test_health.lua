-- :checkhealth memosight and :MemoSight restart with the real server command and model.
local T = require("harness")

T.test("checkhealth reports server, Python, model and the running server", function()
  local cmd, settings = T.server()
  require("memosight").setup({ cmd = cmd, settings = settings, root_markers = { "pyproject.toml" } })
  vim.cmd.edit(T.fixture("sample.py"))
  T.wait_for("status ready", function()
    return require("memosight").status().state == "ready"
  end, 30000)
  vim.cmd("checkhealth memosight")
  local text = T.wait_for("health report", function()
    local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    local joined = table.concat(lines, "\n")
    return joined:find("Running server", 1, true) and joined
  end, 60000)
  T.log(text)
  for _, want in ipairs({
    "Neovim 0.",
    "ghost text: builtin",
    "server command: ",
    "Python 3.",
    "memosight_lsp ",
    "loads (",
    "inline completion advertised",
    "next edits: on",
    "status: ready",
  }) do
    T.truthy(text:find(want, 1, true), "report mentions " .. want)
  end
  T.eq(nil, text:find("ERROR", 1, true), "no errors in the report")
end)

-- Here rather than with the ghost-text cases: a restart loads the model again, which takes a few
-- seconds, and this script already has a running server to restart.
T.test(":MemoSight restart starts a new server", function()
  local memosight = require("memosight")
  vim.cmd("close") -- the health report
  local old = assert(require("memosight.client").get(0)).id
  vim.cmd("MemoSight restart")
  T.wait_for("a new client", function()
    local c = require("memosight.client").get(0)
    return c and c.id ~= old and c.initialized
  end, 30000)
  T.wait_for("status ready", function()
    return memosight.status().state == "ready"
  end, 30000)
end)

T.run(90000)
