-- Multi-line suggestions, items whose range starts before the cursor, cycling through several
-- items, and next-edit proposals drawn, applied, dropped and dismissed, on both ghost-text paths.
-- The tiny random model in the end-to-end tests writes single lines and one item, so these
-- answers come from a small LSP server running inside Neovim (cmd as a function, as for TCP
-- servers).

local T = require("harness")

local api = vim.api

local ROW, LINE = 9, "    return "
local items = {} ---@type table[] the inline completion items the in-process server returns
local next_answer = { edits = {} } ---@type any what it answers to memosight/nextEdit
local asked = {} ---@type table<string, integer> requests received, by method
local next_edit = require("memosight.next_edit")

--- An in-process LSP server that answers inlineCompletion with `items` and nextEdit with
--- `next_answer`.
local function server(dispatchers)
  local closing, next_id = false, 0
  return {
    request = function(method, _, callback)
      next_id = next_id + 1
      asked[method] = (asked[method] or 0) + 1
      local result = nil
      if method == "initialize" then
        result = { capabilities = { textDocumentSync = 1, inlineCompletionProvider = true } }
      elseif method == "textDocument/inlineCompletion" then
        result = { items = vim.deepcopy(items) }
      elseif method == "memosight/nextEdit" then
        result = vim.deepcopy(next_answer)
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
    require("memosight").setup({
      cmd = server,
      ghost_text = path,
      root_markers = { "pyproject.toml" },
      debounce_ms = 20,
      keymaps = { accept = "<C-l>", next_suggestion = "<M-]>", prev_suggestion = "<M-[>" },
      next_edit = { debounce_ms = 20, keymaps = { apply = "<Tab>", dismiss = "<M-d>" } },
    })
    vim.cmd("silent! %bwipeout!")
    vim.cmd.edit(file)
    before = lines()
    T.wait_for("client", function()
      return require("memosight.client").get(0)
    end)
    local pos = { line = ROW - 1, character = #LINE }
    items = { { insertText = "total(radius)\n    x = 2\n    return x", range = { start = pos, ["end"] = pos } } }
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
    items = { {
      insertText = "return area(r)\n    # done",
      range = { start = { line = ROW - 1, character = 4 }, ["end"] = { line = ROW - 1, character = #LINE } },
    } }
    T.eq("area(r)\n    # done", ghost(), "ghost text")
    require("memosight").accept()
    T.wait_for("accepted", function()
      return #lines() == #before + 1
    end)
    T.eq({ LINE .. "area(r)", "    # done" }, { lines()[ROW], lines()[ROW + 1] }, "replaced range")
  end)

  -- The server's items at `area(|)`: they replace the line's rest after the cursor (the `)`)
  -- with text that holds it: at the end (`radius)`, a suggestion before it) or before more
  -- (`radius) + 1`, a line that goes on past it).
  local COL = #LINE + #"area("
  local function ghost_at_closer(insert_text)
    items = { {
      insertText = insert_text,
      range = { start = { line = ROW - 1, character = COL }, ["end"] = { line = ROW - 1, character = COL + 1 } },
    } }
    vim.cmd("stopinsert")
    T.sleep(20)
    vim.cmd("edit!")
    api.nvim_buf_set_lines(0, ROW - 1, ROW, false, { LINE .. "area()" })
    api.nvim_win_set_cursor(0, { ROW, COL })
    T.feed("i")
    return T.wait_for("ghost text", function()
      return require("memosight").ghost_text()
    end)
  end

  --- The ghost text's pieces on the cursor's row: {col, text, placement}, left to right.
  local function drawn()
    local ns = require("memosight.ghost." .. path).ns
    local pieces = {}
    for _, m in ipairs(api.nvim_buf_get_extmarks(0, ns, { ROW - 1, 0 }, { ROW - 1, -1 }, { details = true })) do
      pieces[#pieces + 1] = { m[3], m[4].virt_text[1][1], m[4].virt_text_pos }
    end
    return pieces
  end

  local function accepted(how, want)
    require("memosight")[how]()
    T.wait_for(how .. " to write " .. want, function()
      return lines()[ROW] == LINE .. want
    end)
  end

  T.test(path .. ": an item over the line's rest that ends with it shows before it", function()
    T.eq("radius)", ghost_at_closer("radius)"), "ghost text")
    -- The built-in draws the item over the `)`; ours draws what it adds, before it.
    local want = path == "builtin" and { { COL, "radius)", "overlay" } } or { { COL, "radius", "inline" } }
    T.eq(want, drawn(), "drawn")
    accepted("accept_line", "area(radius)")
  end)

  T.test(path .. ": accepting such an item whole leaves the rest once", function()
    ghost_at_closer("radius)")
    accepted("accept", "area(radius)")
    T.eq({ ROW, COL + #"radius)" }, api.nvim_win_get_cursor(0), "cursor after the item's range")
  end)

  T.test(path .. ": an item through the code after the cursor shows around it", function()
    T.eq("radius) + 1", ghost_at_closer("radius) + 1"), "ghost text")
    local want = path == "builtin" and { { COL, "radius) + 1", "overlay" } }
      or { { COL, "radius", "inline" }, { COL + 1, " + 1", "inline" } }
    T.eq(want, drawn(), "drawn")
    accepted("accept", "area(radius) + 1")
    T.eq({ ROW, #(LINE .. "area(radius) + 1") }, api.nvim_win_get_cursor(0), "cursor at the end")
  end)

  T.test(path .. ": accepting it word by word steps over the kept code", function()
    ghost_at_closer("radius) + 1")
    local function answer(insert_text, from, to) -- the server's next item, as it would answer
      local at = function(c)
        return { line = ROW - 1, character = c }
      end
      items = { { insertText = insert_text, range = { start = at(from), ["end"] = at(to) } } }
    end
    answer(") + 1", COL + 6, COL + 7)
    accepted("accept_word", "area(radius)")
    T.eq({ ROW, COL + #"radius" }, api.nvim_win_get_cursor(0), "cursor before the `)`")
    -- The built-in leaves out what the line already has where it draws; ours draws around it.
    local rest = path == "builtin" and " + 1" or ") + 1"
    T.wait_for("the rest as ghost text", function()
      return require("memosight").ghost_text() == rest
    end)
    answer(" + 1", COL + 7, COL + 7)
    require("memosight").accept_word() -- the `)`: already there
    T.wait_for("the cursor past the `)`", function()
      return api.nvim_win_get_cursor(0)[2] == COL + #"radius)"
    end)
    T.eq(LINE .. "area(radius)", lines()[ROW], "no second `)`")
    T.wait_for("the rest as ghost text", function()
      return require("memosight").ghost_text() == " + 1"
    end)
    accepted("accept_line", "area(radius) + 1")
  end)

  T.test(path .. ": accept word skips an item that disagrees with the typed text", function()
    items = { {
      insertText = "yield 1",
      range = { start = { line = ROW - 1, character = 4 }, ["end"] = { line = ROW - 1, character = #LINE } },
    } }
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

  T.test(path .. ": cycling shows each item of the last answer, with no new request", function()
    local pos = { line = ROW - 1, character = #LINE }
    local function item(text)
      return { insertText = text, range = { start = pos, ["end"] = pos } }
    end
    items = { item("area(radius)"), item("2 * math.pi * radius"), item("None") }
    T.eq("area(radius)", ghost(), "first item, as before")
    local requests = asked["textDocument/inlineCompletion"]
    local memosight = require("memosight")
    T.eq(true, memosight.cycle(1), "cycled")
    T.wait_for("second item", function()
      return memosight.ghost_text() == "2 * math.pi * radius"
    end)
    memosight.cycle(1)
    T.wait_for("third item", function()
      return memosight.ghost_text() == "None"
    end)
    T.feed("<M-]>")
    T.wait_for("wrapped to the first", function()
      return memosight.ghost_text() == "area(radius)"
    end)
    T.feed("<M-[>")
    T.wait_for("back to the last", function()
      return memosight.ghost_text() == "None"
    end)
    T.eq(requests, asked["textDocument/inlineCompletion"], "inline completion requests")
    memosight.accept()
    T.wait_for("accepted", function()
      return lines()[ROW] == LINE .. "None"
    end)
  end)

  T.test(path .. ": with one item cycling changes nothing", function()
    local pos = { line = ROW - 1, character = #LINE }
    items = { { insertText = "area(radius)", range = { start = pos, ["end"] = pos } } }
    T.eq("area(radius)", ghost(), "ghost text")
    require("memosight").cycle(1)
    T.feed("<M-]>")
    T.sleep(100)
    T.eq("area(radius)", require("memosight").ghost_text(), "ghost text after cycling")
    T.eq(before, lines(), "buffer unchanged")
  end)

  -- Next edits. Line 5 reads `    return math.pi * radius**2`; the answer renames its `radius`.
  local USE_ROW = 4 -- 0-based
  local function rename_answer(col)
    return {
      edits = {
        { range = { start = { line = USE_ROW, character = col }, ["end"] = { line = USE_ROW, character = col + 6 } }, newText = "r" },
      },
      window = { start = { line = 0, character = 0 }, ["end"] = { line = 9, character = 0 } },
      reason = vim.NIL,
      source = "rename",
    }
  end

  --- Renames `radius` at line 4 in normal mode and waits for the proposal.
  local function propose_rename()
    vim.cmd("stopinsert")
    items = {}
    vim.cmd("edit!")
    local col = lines()[USE_ROW + 1]:find("radius", 1, true) - 1
    next_answer = rename_answer(col)
    api.nvim_win_set_cursor(0, { 4, 9 })
    T.feed("ciwr<Esc>")
    local p = T.wait_for("a next edit", function()
      return require("memosight").next_edit()
    end)
    return p, col
  end

  local function marks()
    return api.nvim_buf_get_extmarks(0, next_edit.ns, 0, -1, { details = true })
  end

  T.test(path .. ": a next edit elsewhere: old struck through, new after it, a hint with the key", function()
    local p, col = propose_rename()
    T.eq({ USE_ROW, col, USE_ROW, col + 6 }, { p.row, p.col, p.end_row, p.end_col }, "range")
    T.eq({ "radius", "r", "rename" }, { p.old_text, p.new_text, p.source }, "texts")
    local seen = {}
    for _, m in ipairs(marks()) do
      local d = m[4]
      if d.hl_group == next_edit.hl.delete then
        seen.delete = { m[2], m[3], d.end_row, d.end_col }
      elseif d.virt_text_pos == "inline" then
        seen.insert = { m[2], m[3], d.virt_text[1][1], d.virt_text[1][2] }
      elseif d.virt_text_pos == "eol" then
        seen.hint = { m[2], d.virt_text[1][1], d.virt_text[1][2] }
      end
    end
    T.eq({ USE_ROW, col, USE_ROW, col + 6 }, seen.delete, "old text marked")
    T.eq({ USE_ROW, col + 6, "r", next_edit.hl.text }, seen.insert, "new text inline")
    T.eq({ USE_ROW, "  → rename to r (<Tab>)", next_edit.hl.hint }, seen.hint, "hint")
  end)

  T.test(path .. ": the apply key jumps to the next edit and applies it", function()
    local want = lines()[USE_ROW + 1]:gsub("radius", "r")
    next_answer = { edits = {} }
    T.feed("<Tab>")
    T.wait_for("applied", function()
      return lines()[USE_ROW + 1] == want
    end)
    T.eq({ USE_ROW + 1, want:find("r**2", 1, true) - 1 }, api.nvim_win_get_cursor(0), "cursor on the new text")
    T.eq(nil, require("memosight").next_edit(), "proposal gone")
    T.eq(0, #marks(), "extmarks gone")
  end)

  T.test(path .. ": a buffer change drops the proposal", function()
    propose_rename()
    local debounce = next_edit.debounce_ms
    next_edit.debounce_ms = 5000 -- no new answer may come back during the check
    local ok, err = pcall(function()
      api.nvim_buf_set_lines(0, 1, 2, false, { "# changed" })
      T.wait_for("extmarks gone", function()
        return #marks() == 0
      end)
      T.eq(nil, require("memosight").next_edit(), "proposal")
      T.eq(false, require("memosight").apply_next_edit(), "apply after the change")
      T.eq("    return math.pi * radius**2", lines()[USE_ROW + 1], "use untouched")
    end)
    next_edit.debounce_ms = debounce
    assert(ok, err)
  end)

  T.test(path .. ": a range that no longer holds the old text is not applied", function()
    local p = propose_rename()
    -- Every change made through Neovim moves the changedtick; the range check stands behind it.
    -- A proposal whose range holds other text at the same tick:
    local shown = T.truthy(next_edit.show(api.nvim_get_current_buf(), rename_answer(p.col), "utf-16"), "proposal")
    shown.old_text = "RADIUS"
    T.eq(false, require("memosight").apply_next_edit(), "applied")
    T.eq("    return math.pi * radius**2", lines()[USE_ROW + 1], "use untouched")
    T.eq(0, #marks(), "extmarks gone")
  end)

  T.test(path .. ": dismiss hides the next edit and leaves the buffer alone", function()
    propose_rename()
    local want = lines()
    T.feed("<M-d>")
    T.wait_for("dismissed", function()
      return #marks() == 0
    end)
    T.eq(nil, require("memosight").next_edit(), "proposal")
    T.eq(want, lines(), "buffer")
  end)

  T.test(path .. ": an insertion at the cursor shows as ghost text; the accept key applies it", function()
    vim.cmd("stopinsert")
    items = {}
    vim.cmd("edit!")
    local pos = { line = ROW - 1, character = #LINE }
    next_answer = { edits = { { range = { start = pos, ["end"] = pos }, newText = "2 * math.pi * radius" } } }
    api.nvim_win_set_cursor(0, { ROW, 0 })
    T.feed("A")
    T.wait_for("insert mode", function()
      return api.nvim_get_mode().mode == "i"
    end)
    T.feed(" <BS>") -- an edit, so the next edit is asked for
    T.wait_for("a next edit", function()
      return require("memosight").next_edit()
    end)
    local m = marks()
    T.eq(1, #m, "one extmark: no hint")
    T.eq({ ROW - 1, #LINE, "inline", "2 * math.pi * radius" }, { m[1][2], m[1][3], m[1][4].virt_text_pos, m[1][4].virt_text[1][1] }, "ghost")
    next_answer = { edits = {} }
    T.feed("<C-l>")
    T.wait_for("applied", function()
      return lines()[ROW] == LINE .. "2 * math.pi * radius"
    end)
    T.eq({ ROW, #lines()[ROW] }, api.nvim_win_get_cursor(0), "cursor after the insert")
  end)

  T.test(path .. ": no next edit is asked for while a completion ghost is shown", function()
    local pos = { line = ROW - 1, character = #LINE }
    items = { { insertText = "area(radius)", range = { start = pos, ["end"] = pos } } }
    next_answer = { edits = { { range = { start = pos, ["end"] = pos }, newText = "radius" } } }
    local debounce = next_edit.debounce_ms
    next_edit.debounce_ms = 600 -- after the ghost's own pause (the built-in waits 200 ms)
    local ok, err = pcall(function()
      T.eq("area(radius)", ghost(), "ghost")
      local requests = asked["memosight/nextEdit"] or 0
      T.feed(" <BS>")
      T.sleep(1000)
      T.eq("area(radius)", require("memosight").ghost_text(), "ghost still shown")
      T.eq(requests, asked["memosight/nextEdit"] or 0, "nextEdit requests")
      T.eq(nil, require("memosight").next_edit(), "proposal")
    end)
    next_edit.debounce_ms = debounce
    assert(ok, err)
  end)

  T.test(path .. ": malformed next-edit answers are ignored", function()
    vim.cmd("stopinsert")
    local bufnr = api.nvim_get_current_buf()
    local function at(line, character)
      return { line = line, character = character }
    end
    local function edit(s, e, text)
      return { edits = { { range = { start = s, ["end"] = e }, newText = text } } }
    end
    for i, bad in ipairs({
      vim.NIL, "edits", 42, {}, { edits = vim.NIL }, { edits = "x" }, { edits = { 1, "a", vim.NIL } },
      { edits = { { newText = "a" } } },
      { edits = { { range = "0:0", newText = "a" } } },
      edit(at(-1, 0), at(0, 0), "a"),
      edit(at(0, 0), at(0, 0), 5),
      edit(at(0, 0), at(0, 0), vim.NIL),
      edit(at("1", 0), at(1, 0), "a"),
      edit(at(0, 1.5), at(0, 2), "a"),
      edit(at(999, 0), at(999, 0), "a"),
      edit(at(2, 0), at(1, 0), "a"),
      edit(at(0, 0), at(0, 6), "import"), -- changes nothing
    }) do
      local ok, shown = pcall(next_edit.show, bufnr, bad, "utf-16")
      T.eq(true, ok, "answer " .. i .. " raised: " .. tostring(shown))
      T.eq(nil, shown, "answer " .. i .. " shown")
    end
    T.eq(0, #marks(), "nothing drawn")
  end)
end

T.run(90000)
