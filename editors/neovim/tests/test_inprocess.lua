-- Multi-line suggestions and items whose range starts before the cursor, on both ghost-text
-- paths. The tiny random model in the end-to-end tests writes single lines, so these answers
-- come from a small LSP server running inside Neovim (cmd as a function, as for TCP servers).

local T = require("harness")

local api = vim.api

local ROW, LINE = 9, "    return "
local answer ---@type table the item the in-process server returns

--- An in-process LSP server that answers inlineCompletion with `answer`.
local function server(dispatchers)
  local closing, next_id = false, 0
  return {
    request = function(method, _, callback)
      next_id = next_id + 1
      local result = nil
      if method == "initialize" then
        result = { capabilities = { textDocumentSync = 1, inlineCompletionProvider = true } }
      elseif method == "textDocument/inlineCompletion" then
        result = { items = { answer } }
      end
      vim.schedule(function()
        callback(nil, result)
      end)
      return true, next_id
    end,
    notify = function(method)
      if method == "exit" then
        dispatchers.on_exit(0, 15)
      end
      return true
    end,
    is_closing = function()
      return closing
    end,
    terminate = function()
      closing = true
    end,
  }
end

local function ghost()
  vim.cmd("stopinsert")
  T.sleep(20)
  vim.cmd("edit!")
  api.nvim_win_set_cursor(0, { ROW, 0 })
  T.feed("A")
  return T.wait_for("ghost text", function()
    return require("memosight").ghost_text()
  end)
end

local function lines()
  return api.nvim_buf_get_lines(0, 0, -1, false)
end

local file = T.fixture("sample.py")
local before

for _, path in ipairs({ "builtin", "fallback" }) do
  T.test(path .. ": a multi-line suggestion is shown whole and accepted whole", function()
    require("memosight").setup({ cmd = server, ghost_text = path, root_markers = { "pyproject.toml" }, debounce_ms = 20 })
    vim.cmd("silent! %bwipeout!")
    vim.cmd.edit(file)
    before = lines()
    T.wait_for("client", function()
      return require("memosight.client").get(0)
    end)
    local pos = { line = ROW - 1, character = #LINE }
    answer = { insertText = "total(radius)\n    x = 2\n    return x", range = { start = pos, ["end"] = pos } }
    T.eq("total(radius)\n    x = 2\n    return x", ghost(), "ghost text")
    require("memosight").accept()
    T.wait_for("accepted", function()
      return #lines() == #before + 2
    end)
    local want = vim.deepcopy(before)
    want[ROW] = LINE .. "total(radius)"
    vim.list_extend(want, { "    x = 2", "    return x" })
    T.eq(want, lines(), "buffer")
    T.eq({ ROW + 2, #"    return x" }, api.nvim_win_get_cursor(0), "cursor")
  end)

  T.test(path .. ": accept line takes one line at a time", function()
    ghost()
    require("memosight").accept_line()
    T.wait_for("first line", function()
      return lines()[ROW] == LINE .. "total(radius)"
    end)
    T.eq(#before, #lines(), "no new lines yet")
  end)

  T.test(path .. ": a range starting before the cursor shows only the untyped rest", function()
    answer = {
      insertText = "return area(r)\n    # done",
      range = { start = { line = ROW - 1, character = 4 }, ["end"] = { line = ROW - 1, character = #LINE } },
    }
    T.eq("area(r)\n    # done", ghost(), "ghost text")
    require("memosight").accept()
    T.wait_for("accepted", function()
      return #lines() == #before + 1
    end)
    T.eq({ LINE .. "area(r)", "    # done" }, { lines()[ROW], lines()[ROW + 1] }, "replaced range")
  end)

  T.test(path .. ": accept word skips an item that disagrees with the typed text", function()
    answer = {
      insertText = "yield 1",
      range = { start = { line = ROW - 1, character = 4 }, ["end"] = { line = ROW - 1, character = #LINE } },
    }
    vim.cmd("stopinsert")
    vim.cmd("edit!")
    api.nvim_win_set_cursor(0, { ROW, 0 })
    T.feed("A")
    T.sleep(400)
    if path == "fallback" then
      T.eq(nil, require("memosight").ghost_text(), "ghost text of a stale item")
    end
    require("memosight").accept_word()
    T.sleep(50)
    T.eq(before, lines(), "buffer unchanged")
  end)
end

T.run(60000)
