--- End-to-end cases for one ghost-text path against a real server: open the fixture, enter insert
--- mode, wait for the ghost text, check it is what the server answers, accept it (whole, word,
--- line), dismiss it, and drive the :MemoSight commands.

local T = require("harness")
local suggestion = require("memosight.suggestion")

local api = vim.api

---@param path "builtin"|"fallback"
---@return table helpers for path-specific cases
return function(path)
  local memosight = require("memosight")
  local cmd, settings = T.server()
  memosight.setup({
    cmd = cmd,
    settings = settings,
    ghost_text = path,
    root_markers = { "pyproject.toml" },
    debounce_ms = 30,
    keymaps = { accept = "<C-l>", accept_word = "<M-w>", accept_line = "<M-l>", dismiss = "<C-]>" },
  })
  local file = T.fixture("sample.py")
  local ROW, LINE = 9, "    return " -- the fixture's last line; completion goes after it
  local before ---@type string[]

  --- Reloads the fixture, appends at the end of line ROW and waits for the ghost text.
  ---@return string ghost
  local function ghost_at_return()
    vim.cmd("stopinsert")
    T.sleep(20)
    vim.cmd("edit!")
    api.nvim_win_set_cursor(0, { ROW, 0 })
    T.feed("A")
    T.wait_for("insert mode", function()
      return api.nvim_get_mode().mode == "i"
    end)
    return T.wait_for("ghost text", function()
      local text = memosight.ghost_text()
      return text ~= nil and text ~= "" and text
    end)
  end

  --- Buffer lines expected after inserting `text` at the end of line ROW.
  local function with_inserted(text)
    local lines = vim.deepcopy(before)
    local added = vim.split(text, "\n", { plain = true })
    lines[ROW] = LINE .. added[1]
    for i = 2, #added do
      table.insert(lines, ROW + i - 1, added[i])
    end
    return lines
  end

  local function view_lines(kind)
    local bufnr = T.wait_for(kind .. " view", function()
      for _, win in ipairs(api.nvim_list_wins()) do
        local b = api.nvim_win_get_buf(win)
        if vim.b[b].memosight_view == kind then
          return b
        end
      end
    end)
    local lines = api.nvim_buf_get_lines(bufnr, 0, -1, false)
    vim.cmd("close")
    return lines
  end

  T.test("server attaches, reports ready, right ghost-text path", function()
    vim.cmd.edit(file)
    before = api.nvim_buf_get_lines(0, 0, -1, false)
    T.eq(LINE, before[ROW], "fixture line")
    T.wait_for("client attach", function()
      return require("memosight.client").get(0)
    end)
    T.eq(path, (memosight.ghost_path()), "ghost path")
    T.wait_for("status ready", function()
      return memosight.status().state == "ready"
    end, 30000)
    T.truthy(memosight.statusline():match("^MemoSight ready"), "statusline")
  end)

  T.test("ghost text equals the server's inline completion", function()
    local ghost = ghost_at_return()
    local client = assert(require("memosight.client").get(0))
    local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
    params.context = { triggerKind = 1 }
    local response = assert(client:request_sync("textDocument/inlineCompletion", params, 15000, 0))
    T.eq(nil, response.err, "request error")
    local items = response.result.items or response.result
    local item = T.truthy(items[1], "an item")
    local range
    if item.range then
      range = { item.range.start.line, item.range.start.character, item.range["end"].line, item.range["end"].character }
    end
    local s = T.truthy(suggestion.from_item(0, { ROW - 1, #LINE }, item.insertText, range), "suggestion")
    T.eq(s.text, ghost, "ghost text")
  end)

  T.test("cycling walks the answer's items and wraps (one item: unchanged)", function()
    ghost_at_return()
    -- An early answer grows once decoding ends (memosight/completionUpdated) and is asked for
    -- again, which starts the items over: hold the ghost still, after answers in flight land.
    local refresh = require("memosight.refresh")
    local ask_again = refresh.refresh
    refresh.refresh = function() end
    local ok, err = pcall(function()
      T.sleep(500)
      local first = T.truthy(memosight.ghost_text(), "ghost text")
      local seen = { first }
      for _ = 1, 8 do
        memosight.cycle(1)
        local now = T.truthy(memosight.ghost_text(), "ghost text while cycling")
        if now == first then
          break
        end
        seen[#seen + 1] = now
      end
      T.log(("# %d item(s): %s"):format(#seen, vim.inspect(seen)))
      T.eq(first, memosight.ghost_text(), "back at the first item")
      memosight.cycle(-1)
      T.eq(seen[#seen], memosight.ghost_text(), "before the first: the last item")
      T.eq(before[ROW], api.nvim_buf_get_lines(0, 0, -1, false)[ROW], "buffer untouched")
    end)
    refresh.refresh = ask_again
    assert(ok, err)
  end)

  T.test("accept inserts exactly the suggestion", function()
    local ghost = ghost_at_return()
    T.feed("<C-l>")
    T.wait_for("buffer change", function()
      return api.nvim_buf_get_lines(0, 0, -1, false)[ROW] ~= LINE
    end)
    T.eq(with_inserted(ghost), api.nvim_buf_get_lines(0, 0, -1, false), "buffer")
    local added = vim.split(ghost, "\n", { plain = true })
    local want_col = (#added == 1 and #LINE or 0) + #added[#added]
    T.eq({ ROW + #added - 1, want_col }, api.nvim_win_get_cursor(0), "cursor after the insert")
  end)

  T.test("accept word inserts the next word only", function()
    local ghost = ghost_at_return()
    T.feed("<M-w>")
    T.wait_for("buffer change", function()
      return not vim.deep_equal(before, api.nvim_buf_get_lines(0, 0, -1, false))
    end)
    T.eq(with_inserted(suggestion.next_word(ghost)), api.nvim_buf_get_lines(0, 0, -1, false), "buffer")
  end)

  T.test("accept line inserts up to the line break", function()
    local ghost = ghost_at_return()
    T.feed("<M-l>")
    T.wait_for("buffer change", function()
      return not vim.deep_equal(before, api.nvim_buf_get_lines(0, 0, -1, false))
    end)
    T.eq(with_inserted(suggestion.next_line(ghost)), api.nvim_buf_get_lines(0, 0, -1, false), "buffer")
  end)

  T.test("dismiss hides it and leaves the buffer alone", function()
    ghost_at_return()
    T.feed("<C-]>")
    T.wait_for("ghost gone", function()
      return memosight.ghost_text() == nil
    end)
    T.eq(before, api.nvim_buf_get_lines(0, 0, -1, false), "buffer")
  end)

  T.test("leaving insert mode clears it", function()
    ghost_at_return()
    T.feed("<Esc>")
    T.wait_for("ghost gone", function()
      return memosight.ghost_text() == nil
    end)
  end)

  T.test("only the configured keys are mapped; <Tab> is left alone", function()
    local ours = {}
    for _, map in ipairs(api.nvim_get_keymap("i")) do
      if (map.desc or ""):match("MemoSight") and not map.lhs:match("^<Plug>") then
        ours[#ours + 1] = map.lhs
      end
    end
    table.sort(ours)
    T.eq({ "<C-L>", "<C-]>", "<M-l>", "<M-w>" }, ours, "MemoSight insert-mode keys")
    T.eq(nil, (vim.fn.maparg("<Tab>", "i", false, true).desc or ""):match("MemoSight"), "<Tab>")
  end)

  T.test(":MemoSight stats shows numbers", function()
    vim.cmd("stopinsert")
    vim.cmd("MemoSight stats")
    local lines = view_lines("stats")
    local requests = table.concat(lines, "\n"):match("requests%s+(%d+)")
    T.truthy(requests and tonumber(requests) >= 1, "requests count in " .. vim.inspect(lines))
  end)

  T.test(":MemoSight context shows the prompt", function()
    api.nvim_win_set_cursor(0, { ROW, 4 })
    vim.cmd("MemoSight context")
    local lines = view_lines("context")
    T.truthy(lines[1]:match("^Prompt tokens: %d+$"), "first line " .. vim.inspect(lines[1]))
    T.truthy(vim.tbl_contains(lines, "Prompt:"), "prompt header")
  end)

  T.test(":MemoSight toggle turns ghost text off and on", function()
    vim.cmd("MemoSight toggle")
    T.eq(false, memosight.is_enabled(), "enabled")
    T.eq("disabled", memosight.status().state, "status")
    vim.cmd("edit!")
    api.nvim_win_set_cursor(0, { ROW, 0 })
    T.feed("A")
    T.sleep(800)
    T.eq(nil, memosight.ghost_text(), "ghost text while off")
    vim.cmd("MemoSight toggle")
    T.eq(true, memosight.is_enabled(), "enabled")
    ghost_at_return()
  end)

  return { ghost_at_return = ghost_at_return, with_inserted = with_inserted, ROW = ROW, LINE = LINE }
end
