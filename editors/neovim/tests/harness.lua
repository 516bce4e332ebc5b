--- A tiny test runner for headless Neovim. Tests run in a coroutine driven by timers, so the
--- editor's own loop keeps running between steps (insert mode, autocmds, LSP messages).
--- Prints "ok - name" / "not ok - name: error" lines and "N passed, M failed", then exits
--- with status 0 when all passed, 1 otherwise (2 on an overall timeout).

local T = {}

local tests = {}

---@param name string
---@param fn fun()
function T.test(name, fn)
  tests[#tests + 1] = { name = name, fn = fn }
end

---@param text string
function T.log(text)
  io.stdout:write(text .. "\n")
  io.stdout:flush()
end

--- Lets the editor run for `ms` milliseconds.
---@param ms integer
function T.sleep(ms)
  local co = assert(coroutine.running(), "T.sleep must run inside a test")
  vim.defer_fn(function()
    local ok, err = coroutine.resume(co)
    if not ok then
      T.log("not ok - harness: " .. tostring(err))
      vim.cmd("cquit 1")
    end
  end, ms)
  coroutine.yield()
end

--- Polls `cond` until it returns a truthy value, which is returned.
---@param what string
---@param cond fun(): any
---@param timeout_ms? integer
function T.wait_for(what, cond, timeout_ms)
  local deadline = vim.uv.now() + (timeout_ms or 15000)
  while true do
    local ok, value = pcall(cond)
    if ok and value then
      return value
    end
    if vim.uv.now() > deadline then
      error(("timed out waiting for %s%s"):format(what, ok and "" or (": " .. tostring(value))), 0)
    end
    T.sleep(20)
  end
end

function T.eq(expected, actual, what)
  if not vim.deep_equal(expected, actual) then
    error(("%s: expected %s, got %s"):format(what or "value", vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

function T.truthy(value, what)
  if not value then
    error(("%s: expected a true value, got %s"):format(what or "value", vim.inspect(value)), 2)
  end
  return value
end

--- Types keys as if the user did (mappings apply).
---@param keys string
function T.feed(keys)
  vim.api.nvim_feedkeys(vim.keycode(keys), "mt", false)
end

--- Runs the registered tests, then exits Neovim.
---@param timeout_ms? integer overall limit
function T.run(timeout_ms)
  vim.defer_fn(function()
    T.log("not ok - harness: overall timeout")
    vim.cmd("cquit 2")
  end, timeout_ms or 60000)
  local co = coroutine.create(function()
    local failed = 0
    for _, t in ipairs(tests) do
      local started = vim.uv.hrtime()
      local ok, err = xpcall(t.fn, debug.traceback)
      local ms = (vim.uv.hrtime() - started) / 1e6
      if ok then
        T.log(("ok - %s (%d ms)"):format(t.name, ms))
      else
        failed = failed + 1
        T.log(("not ok - %s: %s"):format(t.name, err))
      end
      vim.cmd("stopinsert")
      T.sleep(10)
    end
    T.log(("%d passed, %d failed"):format(#tests - failed, failed))
    vim.cmd("cquit " .. (failed > 0 and 1 or 0))
  end)
  vim.schedule(function()
    local ok, err = coroutine.resume(co)
    if not ok then
      T.log("not ok - harness: " .. tostring(err))
      vim.cmd("cquit 1")
    end
  end)
end

--- The server command and model for tests, from the environment the pytest wrapper sets.
---@return string[] cmd, table settings
function T.server()
  local cmd = vim.json.decode((assert(os.getenv("MEMOSIGHT_TEST_CMD"), "MEMOSIGHT_TEST_CMD is not set")))
  local settings = { completion = { maxNewTokens = 12 } }
  local model = os.getenv("MEMOSIGHT_TEST_MODEL")
  if model and model ~= "" then
    settings.model = { path = model, device = "cpu" }
  end
  return cmd, settings
end

--- Copies the fixture project into a fresh temp folder and returns the path of `name` in it.
---@param name string
---@return string
function T.fixture(name)
  local src = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/fixtures"
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, "p")
  for _, file in ipairs(vim.fn.readdir(src)) do
    vim.fn.writefile(vim.fn.readfile(src .. "/" .. file, "b"), dir .. "/" .. file, "b")
  end
  return dir .. "/" .. name
end

--- Loads a test file (which registers tests and calls T.run); a load error exits with status 3.
---@param file string
function T.main(file)
  local ok, err = xpcall(dofile, debug.traceback, file)
  if not ok then
    T.log("not ok - loading " .. file .. ": " .. tostring(err))
    vim.cmd("cquit 3")
  end
end

return T
