-- secure-orca: identity headers for kube-apiserver's requestheader authenticator.
-- Envoy's Lua filter runs this program after a prologue that bootstrap.py writes from the replicas'
-- requestheader flags; it defines five locals:
--   IDENTITY_HEADERS  lower-cased names to remove exactly (username, group and uid headers)
--   EXTRA_PREFIXES    lower-cased prefixes to remove (extra headers)
--   AUTHENTICATE      true when Envoy is kube's authenticating front proxy
--   USER_HEADER       the header that carries the certificate's CN
--   GROUP_HEADER      the header that carries each of its O values
local exact = {}
for _, name in ipairs(IDENTITY_HEADERS) do exact[name] = true end

-- What kube reads from a header must equal what it would read from the certificate: no control characters
-- (they cannot travel), no leading or trailing white space (HTTP would trim it), not empty.
local function faithful(value)
  return value ~= "" and not value:find("[%z\1-\31\127]") and not value:find("^[ \t]") and not value:find("[ \t]$")
end

function envoy_on_request(handle)
  local headers = handle:headers()
  local doomed = {}
  for name, _ in pairs(headers) do
    local lower = name:lower()
    local drop = exact[lower]
    for _, prefix in ipairs(EXTRA_PREFIXES) do
      if lower:sub(1, #prefix) == prefix then drop = true end
    end
    if drop then doomed[#doomed + 1] = name end
  end
  for _, name in ipairs(doomed) do headers:remove(name) end
  if not AUTHENTICATE then return end
  local ssl = handle:streamInfo():downstreamSslConnection()
  if ssl == nil or not ssl:peerCertificatePresented() or not ssl:peerCertificateValidated() then return end
  local subject = ssl:parsedSubjectPeerCertificate()
  if subject == nil or subject:commonName() == "" then return end
  local groups = subject:organizationName()
  local values = {subject:commonName()}
  for _, group in ipairs(groups) do values[#values + 1] = group end
  for _, value in ipairs(values) do
    if not faithful(value) then
      handle:respond({[":status"] = "400"}, "client certificate subject cannot be forwarded faithfully\n")
      return
    end
  end
  headers:add(USER_HEADER, subject:commonName())
  for _, group in ipairs(groups) do headers:add(GROUP_HEADER, group) end
end
