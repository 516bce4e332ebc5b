--- Next edits against the real server, on one ghost-text path: rename a local at its definition,
--- leave insert mode, and its next use is offered (the server's rename follow-up answers at once,
--- with no model); the apply key applies it and the following use is offered; dismiss hides one;
--- a buffer change drops one.

local T = require("harness")

local api = vim.api

---@param path "builtin"|"fallback"
return function(path)
  local memosight = require("memosight")
  local next_edit = require("memosight.next_edit")
  local cmd, settings = T.server()
  memosight.setup({
    cmd = cmd,
    settings = settings,
    ghost_text = path,
    root_markers = { "pyproject.toml" },
    debounce_ms = 30,
    next_edit = { debounce_ms = 50, keymaps = { apply = "<Tab>", dismiss = "<M-d>" } },
  })
  local file = T.fixture("rename.py")

  local function lines()
    return api.nvim_buf_get_lines(0, 0, -1, false)
  end

  local function marks()
    return api.nvim_buf_get_extmarks(0, next_edit.ns, 0, -1, { details = true })
  end

  --- Waits for the proposal at 0-based `row`; returns it.
  local function proposal_at(row)
    return T.wait_for("a next edit at line " .. (row + 1), function()
      local p = memosight.next_edit()
      return p and p.row == row and p
    end, 30000)
  end

  --- The end-of-line hint drawn at 0-based `row`, or nil.
  local function hint_at(row)
    for _, m in ipairs(marks()) do
      if m[2] == row and m[4].virt_text_pos == "eol" then
        return m[4].virt_text[1][1]
      end
    end
  end

  T.test("server attaches and reports ready", function()
    vim.cmd.edit(file)
    T.wait_for("status ready", function()
      return memosight.status().state == "ready"
    end, 30000)
  end)

  T.test("renaming a local at its definition offers its next use", function()
    api.nvim_win_set_cursor(0, { 2, 4 })
    T.feed("ciwsum_all<Esc>")
    T.wait_for("renamed", function()
      return lines()[2] == "    sum_all = 0"
    end)
    local p = proposal_at(3)
    T.eq({ 3, 8, 3, 14, "result", "sum_all" }, { p.row, p.col, p.end_row, p.end_col, p.old_text, p.new_text }, "proposal")
    T.eq("rename", p.source, "source")
    T.eq("  → rename to sum_all (<Tab>)", hint_at(3), "hint at the use")
  end)

  T.test("the apply key applies it, then the following use is offered", function()
    T.feed("<Tab>")
    T.wait_for("applied", function()
      return lines()[4] == "        sum_all += value"
    end)
    T.eq({ 4, 14 }, api.nvim_win_get_cursor(0), "cursor on the new name")
    local p = proposal_at(4)
    T.eq({ "result", "sum_all" }, { p.old_text, p.new_text }, "following use")
  end)

  T.test("dismiss hides the next edit and leaves the buffer alone", function()
    local before = lines()
    T.feed("<M-d>")
    T.wait_for("dismissed", function()
      return #marks() == 0
    end)
    T.eq(nil, memosight.next_edit(), "proposal")
    T.eq(before, lines(), "buffer")
  end)

  T.test("a buffer change drops the proposal", function()
    api.nvim_win_set_cursor(0, { 9, 4 })
    T.feed("ciwn<Esc>")
    proposal_at(10)
    local debounce = next_edit.debounce_ms
    next_edit.debounce_ms = 5000 -- no new answer may come back during the check
    local ok, err = pcall(function()
      api.nvim_buf_set_text(0, 7, 0, 7, 0, { "# counts " })
      T.wait_for("extmarks gone", function()
        return #marks() == 0
      end)
      T.eq(nil, memosight.next_edit(), "proposal")
      T.eq(false, memosight.apply_next_edit(), "apply after the change")
      T.eq("        seen += 1", lines()[11], "use untouched")
    end)
    next_edit.debounce_ms = debounce
    assert(ok, err)
  end)
end
