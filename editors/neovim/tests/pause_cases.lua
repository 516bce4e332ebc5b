--- A pause with no keystroke: the server answers early (completion.firstResponseMs 1: what the
--- model verified by then), decodes on and says so when the suggestion grew
--- (memosight/completionUpdated); the ghost text must become the whole suggestion with nothing
--- typed. Run on one ghost-text path against the real server and the embedded model (a random
--- model may never write more than its first word).

local T = require("harness")

local api = vim.api

---@param path "builtin"|"fallback"
return function(path)
  local memosight = require("memosight")
  local refresh = require("memosight.refresh")
  local cmd, settings = T.server()
  settings.completion = { firstResponseMs = 1, maxNewTokens = 24, multiline = "always" }
  memosight.setup({
    cmd = cmd,
    settings = settings,
    ghost_text = path,
    root_markers = { "pyproject.toml" },
    debounce_ms = 30,
  })
  local file = T.fixture("sample.py")
  local ROW = 9 -- `    return `: the completion goes after it

  T.test("server attaches and reports ready", function()
    vim.cmd.edit(file)
    T.wait_for("status ready", function()
      return memosight.status().state == "ready"
    end, 60000)
  end)

  T.test("after a pause the whole suggestion shows, with no keystroke", function()
    local before = api.nvim_buf_get_lines(0, 0, -1, false)
    local asked = refresh.count
    api.nvim_win_set_cursor(0, { ROW, 0 })
    T.feed("A")
    T.wait_for("the server to say the suggestion grew", function()
      return refresh.count > asked
    end, 30000)
    local client = assert(require("memosight.client").get(0))
    local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
    params.context = { triggerKind = 1 }
    local response = assert(client:request_sync("textDocument/inlineCompletion", params, 15000, 0))
    local items = response.result and (response.result.items or response.result) or {}
    local whole = T.truthy(items[1] and items[1].insertText, "the whole suggestion")
    T.wait_for("the whole suggestion as ghost text", function()
      return memosight.ghost_text() == whole
    end, 20000)
    T.eq(before, api.nvim_buf_get_lines(0, 0, -1, false), "nothing typed")
  end)
end
