// ParleyClient.cs: a client for `parley serve` (protocol v1, docs/serving.md) in one file, for Unity and
// any .NET with System.Net.Http. No JSON library: a small reader/writer for the protocol's values is at
// the end (Unity's JsonUtility cannot read free-form objects such as tool arguments or diagnostics).
// The one C# protocol core: the Unity package (clients/unity) and clients/csharp both build this file.
//
// HTTP goes through an IParleyTransport: HttpClientTransport (System.Net.Http, the default everywhere but a
// WebGL player) or, in Unity, UnityWebRequestTransport (UnityWebRequestTransport.cs beside this file; the
// default in a WebGL player, which has no threads and no sockets). A transport only moves bytes and keeps
// time: the SSE parsing, resume with Last-Event-ID, error codes, tool answers and JSON are here, once.
// Nothing here waits on a timer or a thread of its own: delays and silences are the transport's.
//
// Objects from the server are Dictionary<string, object>, arrays List<object>, numbers long or double,
// strings string, true/false bool, null null. C# 7 only, so Mono's mcs and Unity's compiler both take it.
//
// Threading: every callback of Turn (onEvent, tools) runs on the caller's synchronization context (Unity's
// main thread when Turn is awaited from it). Tool results go out on their own requests while the turn's
// stream is still being read. One client may run turns of several sessions at once.

using System;
using System.Collections;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Net;
using System.Net.Http;
using System.Net.Sockets;
using System.Runtime.ExceptionServices;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace Parley
{
    /// <summary>An error from the server (its code, e.g. unknown_session, busy, cancelled) or from reaching it:
    /// "unavailable" (no connection could be made: the server was never reached), "server_gone" (it had been
    /// answering, went away, and reconnecting failed), "turn_lost" (a server answers, but none has the turn).
    /// Status is the HTTP status; 0 for a turn that failed inside its stream (turn_failed) or no answer at all.</summary>
    public sealed class ParleyException : Exception
    {
        public readonly string Code;
        public readonly int Status;
        /// <summary>The error's problems (each a Dictionary: severity, message, file, node_id, field, line, column).</summary>
        public readonly List<object> Problems;
        /// <summary>For turn_failed: the node and field it names ("" when none), and for model_missing the
        /// model name the server's models folder has no file for.</summary>
        public readonly string Node, Field, Model;
        /// <summary>For a turn that failed (turn_failed, turn_lost, server_gone, stream_ended): the player's line,
        /// handed back to say again; "" otherwise.</summary>
        public readonly string Line;

        public ParleyException(string code, string message, int status, List<object> problems = null,
                               string node = "", string field = "", Exception inner = null, string model = "",
                               string line = "")
            : base(code + ": " + message, inner)
        {
            Line = line ?? "";
            Code = code;
            Status = status;
            Problems = problems ?? new List<object>();
            Node = node ?? "";
            Field = field ?? "";
            Model = model ?? "";
        }
    }

    /// <summary>One event of a turn's stream: its kind (turn_started, turn_queued, node_started, token, speak, tool_request,
    /// tool_call, summarized, warning, guarded, game_event, node_finished, turn_finished, turn_failed) and its data.
    /// guarded: a Guard node found a policy broken (node, policy, exit "policy:NAME", check, why, checked "line" or
    /// "reply"); game_event: the turn reached a node or exit the asset marks for the game (node, name, exit).
    /// A kind this client does not know (a newer server's) reaches onEvent all the same.</summary>
    public sealed class TurnEvent
    {
        public readonly string Kind;
        public readonly Dictionary<string, object> Data;
        /// <summary>The data as the server sent it (one line of JSON), for JsonUtility and logs.</summary>
        public readonly string RawData;
        /// <summary>The event's SSE id, RUN.N ("" when the server gave none).</summary>
        public readonly string Id;

        public TurnEvent(string kind, Dictionary<string, object> data, string rawData, string id = "")
        {
            Kind = kind;
            Data = data;
            RawData = rawData;
            Id = id ?? "";
        }

        /// <summary>A string field of the data ("" when it is missing or not a string), e.g. e.Text("text").</summary>
        public string Text(string key)
        {
            object v;
            return Data.TryGetValue(key, out v) && v is string ? (string)v : "";
        }

        /// <summary>A true/false field of the data (false when it is missing or not one).</summary>
        public bool Flag(string key)
        {
            object v;
            return Data.TryGetValue(key, out v) && v is bool && (bool)v;
        }

        /// <summary>A token or speak event of the reply the player sees (not an inner node's, such as a Tool
        /// Call's JSON or a classifier's label): the only text a game shows as it streams.</summary>
        public bool IsReply
        {
            get { return (Kind == "token" || Kind == "speak") && Flag("reply"); }
        }
    }

    /// <summary>A tool call the turn waits on: answer it by returning the result text from Turn's tools.</summary>
    public sealed class ToolRequest
    {
        public string SessionId, Node, Tool, CallId;
        public Dictionary<string, object> Arguments;
        /// <summary>The arguments as JSON, for JsonUtility.FromJson.</summary>
        public string ArgumentsJson;
    }

    /// <summary>What turn_finished says: the reply and where the turn sits.</summary>
    public sealed class TurnResult
    {
        public int Turn;
        public long TurnId;
        public string Reply;
        public List<string> Path = new List<string>();
        /// <summary>The turn's diagnostics when the asset has enable_diagnostics on; else null.</summary>
        public Dictionary<string, object> Diagnostics;
        /// <summary>The first policy a Guard node found broken in the turn ("" when none did), the exit it took
        /// ("policy:NAME") and the Guard node; each guard that fired is also a guarded event.</summary>
        public string GuardPolicy = "", GuardExit = "", GuardNode = "";
        /// <summary>The game events (the asset's game_events) the turn reached, by name, in order.</summary>
        public List<string> GameEvents = new List<string>();
        /// <summary>The reply tags the asset asks for (its reply_tags, e.g. "mood" -> "angry"): the value each
        /// listed slot had at the turn's end. Empty when the asset lists none (or the server is older).</summary>
        public Dictionary<string, string> Tags = new Dictionary<string, string>();
        public Dictionary<string, object> Data;
    }

    public sealed class SessionInfo
    {
        public string Id, Asset, AssetName, Backend;
        public int Turns;
        public bool Busy;
        public Dictionary<string, object> Variables;

        internal static SessionInfo From(object json)
        {
            var o = Json.Obj(json);
            return new SessionInfo
            {
                Id = Json.Str(o, "id"), Asset = Json.Str(o, "asset"), AssetName = Json.Str(o, "asset_name"),
                Backend = Json.Str(o, "backend"), Turns = (int)Json.Long(o, "turns"), Busy = Json.Bool(o, "busy"),
                Variables = Json.Obj(Json.Get(o, "variables")),
            };
        }
    }

    public sealed class HealthInfo
    {
        public string Status, Api, Backend;
        public int Sessions;
    }

    public sealed class AssetInfo
    {
        public string Path, Name;
    }

    public sealed class TurnLine
    {
        public long TurnId;
        public int Index;
        public string Line, Reply;
    }

    // --- the transport seam --------------------------------------------------------------------------------

    /// <summary>How a request that got no answer failed: no connection was made (NotConnected: nothing reached
    /// the server), one was made and broke (Broke), or the request's time ran out (TimedOut).</summary>
    public enum TransportFailure { NotConnected, Broke, TimedOut }

    /// <summary>A request that got no HTTP answer (an answer with any status is not this).</summary>
    public sealed class ParleyTransportException : Exception
    {
        public readonly TransportFailure Failure;

        public ParleyTransportException(TransportFailure failure, string message, Exception inner = null)
            : base(message, inner)
        {
            Failure = failure;
        }
    }

    /// <summary>One HTTP request as the client asks a transport for it.</summary>
    public sealed class ParleyRequest
    {
        public string Method, Url;
        /// <summary>JSON text (sent as application/json, UTF-8), or null for none.</summary>
        public string Body;
        public readonly List<KeyValuePair<string, string>> Headers = new List<KeyValuePair<string, string>>();
        /// <summary>Send: until the whole answer is in; Open: until its status is (Timeout.InfiniteTimeSpan: none).</summary>
        public TimeSpan Timeout = System.Threading.Timeout.InfiniteTimeSpan;
    }

    /// <summary>A whole answer: its status and its body as text.</summary>
    public sealed class ParleyAnswer
    {
        public readonly int Status;
        public readonly string Body;

        public ParleyAnswer(int status, string body)
        {
            Status = status;
            Body = body ?? "";
        }
    }

    /// <summary>What carries the client's HTTP. It moves bytes and keeps time, nothing more: the protocol is
    /// ParleyClient's. Its tasks may complete on any thread, but must never block one (WebGL has one).</summary>
    public interface IParleyTransport : IDisposable
    {
        /// <summary>One request and its whole answer; ParleyTransportException when no answer came.</summary>
        Task<ParleyAnswer> Send(ParleyRequest request);

        /// <summary>Opens a streamed answer (an event stream): completes once its status is known.
        /// ParleyTransportException when no answer came; cancelling the token aborts it
        /// (OperationCanceledException).</summary>
        Task<IParleyStream> Open(ParleyRequest request, CancellationToken cancel);

        /// <summary>A wait that holds no thread.</summary>
        Task Delay(TimeSpan delay, CancellationToken cancel);
    }

    /// <summary>A streamed answer. Dispose aborts it: a read in flight then ends (with an exception, or 0).</summary>
    public interface IParleyStream : IDisposable
    {
        int Status { get; }

        /// <summary>The answer's header <paramref name="name"/> (case-insensitive), or null.</summary>
        string Header(string name);

        /// <summary>The next bytes of the body into buffer: how many (0 at its end). Throws when the connection
        /// breaks, and ParleyTransportException TimedOut when nothing arrives for <paramref name="silence"/>
        /// (Timeout.InfiniteTimeSpan or zero: no limit).</summary>
        Task<int> Read(byte[] buffer, TimeSpan silence);

        /// <summary>The rest of the body as text (for an error's answer).</summary>
        Task<string> ReadToEnd();
    }

    /// <summary>An event stream's bytes, as they arrive in chunks of any size, turned into its lines: UTF-8
    /// decoded across chunk boundaries (a character split between two chunks comes out whole), lines ending
    /// in \n, \r\n or \r (a \r\n split between two chunks is one line end).</summary>
    public sealed class SseLineReader
    {
        readonly Decoder decoder = new UTF8Encoding(false).GetDecoder();
        readonly StringBuilder partial = new StringBuilder();
        readonly Queue<string> lines = new Queue<string>();
        char[] chars = new char[0];
        bool afterCarriageReturn;

        public void Feed(byte[] bytes, int count)
        {
            if (chars.Length < count + 4) chars = new char[count + 4]; // + a character held from the last chunk
            int n = decoder.GetChars(bytes, 0, count, chars, 0, false);
            for (int i = 0; i < n; i++)
            {
                char c = chars[i];
                if (afterCarriageReturn && c == '\n')
                {
                    afterCarriageReturn = false;
                    continue;
                }
                afterCarriageReturn = c == '\r';
                if (c == '\n' || c == '\r')
                {
                    lines.Enqueue(partial.ToString());
                    partial.Length = 0;
                }
                else partial.Append(c);
            }
        }

        /// <summary>The next whole line, if one has arrived.</summary>
        public bool TryTake(out string line)
        {
            if (lines.Count > 0)
            {
                line = lines.Dequeue();
                return true;
            }
            line = null;
            return false;
        }
    }

    public sealed class ParleyClient : IDisposable
    {
        readonly IParleyTransport transport;
        readonly string baseUrl, token;
        const string RunHeader = "Parley-Run"; // a turn's answer names its run here, before its first event

        /// <summary>How long an ordinary request may take (a turn's stream has no limit: cancel it instead).</summary>
        public TimeSpan RequestTimeout = TimeSpan.FromSeconds(30);

#if UNITY_WEBGL && !UNITY_EDITOR
        /// <param name="baseUrl">The address `parley serve` printed, e.g. http://127.0.0.1:8765</param>
        /// <param name="token">The server's token (PARLEY_SERVE_TOKEN) when it has one.</param>
        public ParleyClient(string baseUrl, string token = null)
            : this(baseUrl, token, new UnityWebRequestTransport()) { } // a WebGL player has no HttpClient
#else
        /// <param name="baseUrl">The address `parley serve` printed, e.g. http://127.0.0.1:8765</param>
        /// <param name="token">The server's token (PARLEY_SERVE_TOKEN) when it has one.</param>
        /// <param name="handler">HttpClient's handler (null: its default).</param>
        public ParleyClient(string baseUrl, string token = null, HttpMessageHandler handler = null)
            : this(baseUrl, token, new HttpClientTransport(handler)) { }
#endif

        /// <summary>A client whose HTTP goes through <paramref name="transport"/> (disposed with the client).</summary>
        public ParleyClient(string baseUrl, string token, IParleyTransport transport)
        {
            if (transport == null) throw new ArgumentNullException("transport");
            this.baseUrl = baseUrl.TrimEnd('/') + "/v1";
            this.token = token;
            this.transport = transport;
        }

        public void Dispose() { transport.Dispose(); }

        // --- routes ------------------------------------------------------------------------------------

        public async Task<HealthInfo> Health()
        {
            var o = Json.Obj(await Send("GET", "/health", null));
            return new HealthInfo { Status = Json.Str(o, "status"), Api = Json.Str(o, "api"),
                                    Backend = Json.Str(o, "backend"), Sessions = (int)Json.Long(o, "sessions") };
        }

        /// <summary>Stops the server (for a game that cannot send its child SIGTERM, on Windows): its turns
        /// are cancelled, their sessions kept as before them, and it exits within the seconds returned.
        /// Needs the server's token; a server started without one refuses it (forbidden).</summary>
        public async Task<double> Shutdown()
        {
            return Json.Double(Json.Obj(await Send("POST", "/shutdown", "{}")), "seconds");
        }

        public async Task<List<AssetInfo>> Assets()
        {
            var list = new List<AssetInfo>();
            foreach (var item in Json.Arr(Json.Get(Json.Obj(await Send("GET", "/assets", null)), "assets")))
            {
                var a = Json.Obj(item);
                list.Add(new AssetInfo { Path = Json.Str(a, "path"), Name = Json.Str(a, "name") });
            }
            return list;
        }

        /// <param name="asset">A path relative to one of the server's --assets folders, e.g. "chat.json".</param>
        /// <param name="id">The session's id (letters, digits, _ . -); the server makes one when null.</param>
        public async Task<SessionInfo> CreateSession(string asset, IDictionary<string, object> variables = null,
                                                     string id = null)
        {
            var body = new Dictionary<string, object> { { "asset", asset } };
            if (variables != null) body["variables"] = variables;
            if (id != null) body["id"] = id;
            return SessionInfo.From(await Send("POST", "/sessions", Json.Write(body)));
        }

        public async Task<List<SessionInfo>> ListSessions()
        {
            var list = new List<SessionInfo>();
            foreach (var s in Json.Arr(Json.Get(Json.Obj(await Send("GET", "/sessions", null)), "sessions")))
                list.Add(SessionInfo.From(s));
            return list;
        }

        public async Task<SessionInfo> GetSession(string sessionId)
        {
            return SessionInfo.From(await Send("GET", S(sessionId), null));
        }

        /// <summary>Deletes the session (a running turn is cancelled first).</summary>
        public Task DeleteSession(string sessionId) { return Send("DELETE", S(sessionId), null); }

        /// <summary>The session's dialog history file, as JSON text (keep it to ImportHistory later).</summary>
        public async Task<string> ExportHistory(string sessionId)
        {
            return Json.Write(await Send("GET", S(sessionId) + "/history", null));
        }

        public async Task<SessionInfo> ImportHistory(string sessionId, string historyJson)
        {
            return SessionInfo.From(await Send("PUT", S(sessionId) + "/history", historyJson));
        }

        /// <summary>Sets agent variables (values: string, bool, long/int or double).</summary>
        public async Task<SessionInfo> SetVariables(string sessionId, IDictionary<string, object> variables)
        {
            var body = new Dictionary<string, object> { { "variables", variables } };
            return SessionInfo.From(await Send("PATCH", S(sessionId) + "/variables", Json.Write(body)));
        }

        /// <summary>Changes prompts and sampling: node id -> { system_prompt, temperature, top_p, max_tokens, seed }.</summary>
        public async Task<SessionInfo> ChangeParams(string sessionId, IDictionary<string, object> nodes)
        {
            var body = new Dictionary<string, object> { { "nodes", nodes } };
            return SessionInfo.From(await Send("PATCH", S(sessionId) + "/params", Json.Write(body)));
        }

        /// <summary>Keeps the first <paramref name="turns"/> turns of the current branch.</summary>
        public async Task<SessionInfo> Rewind(string sessionId, int turns)
        {
            var body = new Dictionary<string, object> { { "turns", turns } };
            return SessionInfo.From(await Send("POST", S(sessionId) + "/rewind", Json.Write(body)));
        }

        /// <summary>Stops the session's running turn (it ends with turn_failed "cancelled"); false when none ran.</summary>
        public async Task<bool> Cancel(string sessionId)
        {
            return Json.Bool(Json.Obj(await Send("POST", S(sessionId) + "/cancel", "{}")), "cancelled");
        }

        /// <summary>Answers a tool_request by hand (Turn does it for you when you give it tools).</summary>
        public Task ToolResult(string sessionId, string callId, string result)
        {
            var body = new Dictionary<string, object> { { "call_id", callId }, { "result", result ?? "" } };
            return Send("POST", S(sessionId) + "/tool_results", Json.Write(body));
        }

        /// <summary>The turns of the current branch.</summary>
        public async Task<List<TurnLine>> Turns(string sessionId)
        {
            var list = new List<TurnLine>();
            foreach (var item in Json.Arr(Json.Get(Json.Obj(await Send("GET", S(sessionId) + "/turns", null)), "turns")))
            {
                var t = Json.Obj(item);
                list.Add(new TurnLine { TurnId = Json.Long(t, "turn_id"), Index = (int)Json.Long(t, "index"),
                                        Line = Json.Str(t, "line"), Reply = Json.Str(t, "reply") });
            }
            return list;
        }

        /// <summary>Runs one turn: streams its events to onEvent, answers each tool_request with tools (when
        /// given; else answer with ToolResult yourself), and returns what turn_finished says. A failed turn
        /// throws ParleyException with turn_failed's code (cancelled, tool_timeout, turn_error, ...) and the
        /// player's line in Line; the session is then as it was before. Cancelling the token stops the turn on
        /// the server and throws OperationCanceledException. A tool that throws stops the turn too, and its
        /// exception comes out.
        /// A stream that breaks mid-turn (connection reset, the server's replica gone, a stream silent for
        /// StreamIdleTimeout) is resumed from the last event seen, on the resume route, up to ResumeTries
        /// times: the events go on to onEvent with none twice. When the turn cannot be resumed Turn throws
        /// ParleyException "turn_lost" (a server answers, but none has the turn: the one that ran it stopped
        /// before it finished) or "server_gone" (no try to resume it reached a server), its Line the player's
        /// line to say again; "unavailable" when the turn's first request could not connect at all.
        /// cancelOnDisconnect: the server cancels the turn when its stream drops, and the client does not resume.
        /// toolsAsync: instead of tools, a tool whose answer takes asynchronous game work (a lookup, a coroutine:
        /// see Answered); the turn's events wait for its answer, on the caller's context, as they do for tools.</summary>
        public Task<TurnResult> Turn(string sessionId, string line, Func<ToolRequest, string> tools = null,
                                     Action<TurnEvent> onEvent = null,
                                     CancellationToken cancel = default(CancellationToken), string instructions = "",
                                     bool cancelOnDisconnect = false, Func<ToolRequest, Task<string>> toolsAsync = null)
        {
            var body = new Dictionary<string, object> { { "line", line }, { "instructions", instructions ?? "" } };
            if (cancelOnDisconnect) body["cancel_on_disconnect"] = true;
            return Stream(sessionId, "/turns", Json.Write(body), new RunState { Line = line ?? "", NoResume = cancelOnDisconnect },
                          Either(tools, toolsAsync), onEvent, cancel);
        }

        /// <summary>Runs turn <paramref name="turn"/> (from 0) again on a new branch; otherwise like Turn.</summary>
        public Task<TurnResult> Regenerate(string sessionId, int turn, Func<ToolRequest, string> tools = null,
                                           Action<TurnEvent> onEvent = null,
                                           CancellationToken cancel = default(CancellationToken),
                                           bool cancelOnDisconnect = false, Func<ToolRequest, Task<string>> toolsAsync = null)
        {
            var body = new Dictionary<string, object> { { "turn", turn } };
            if (cancelOnDisconnect) body["cancel_on_disconnect"] = true;
            return Stream(sessionId, "/regenerate", Json.Write(body), new RunState { NoResume = cancelOnDisconnect },
                          Either(tools, toolsAsync), onEvent, cancel);
        }

        /// <summary>A coroutine-friendly tool for Turn's toolsAsync: <paramref name="tools"/> gets each request and
        /// a callback to call with the result whenever it has one (say, at the end of a coroutine it starts:
        /// <c>Answered((call, answer) =&gt; StartCoroutine(LookUp(call, answer)))</c>). A tool that never answers
        /// ends its turn with the server's tool_timeout.</summary>
        public static Func<ToolRequest, Task<string>> Answered(Action<ToolRequest, Action<string>> tools)
        {
            if (tools == null) throw new ArgumentNullException("tools");
            return request =>
            {
                var answer = new TaskCompletionSource<string>();
                tools(request, result => answer.TrySetResult(result ?? ""));
                return answer.Task;
            };
        }

        static Func<ToolRequest, Task<string>> Either(Func<ToolRequest, string> tools, Func<ToolRequest, Task<string>> toolsAsync)
        {
            if (tools != null && toolsAsync != null)
                throw new ArgumentException("give tools or toolsAsync, not both");
            if (tools == null) return toolsAsync;
            return request => Task.FromResult(tools(request)); // a throw comes out at once, as before
        }

        // --- the turn's stream -----------------------------------------------------------------------------

        /// <summary>Attempts to reach the resume route after a turn's stream broke, counted from the last event
        /// that arrived: the first at once, then after ResumeDelay, doubling (0.3, 0.6, 1.2, 2.4 s: about 4.5 s).</summary>
        public int ResumeTries = 5;
        public TimeSpan ResumeDelay = TimeSpan.FromMilliseconds(300);
        /// <summary>A turn's stream that sends nothing this long (the server sends a keep-alive every 15 s) is
        /// taken as broken, and resumed.</summary>
        public TimeSpan StreamIdleTimeout = TimeSpan.FromSeconds(45);

        // What one turn's stream has seen, across the connections that carry it.
        sealed class RunState
        {
            public string Line = ""; // the player's line (regenerate: turn_started's), handed back on failure
            public bool NoResume; // cancel_on_disconnect: the server cancels the turn when its stream drops
            public string Run; // from turn_started or turn_queued (or the first event's id)
            public long Seen; // N of the last event delivered (its id RUN.N)
            public int Attempts; // resume attempts since an event last arrived
            public bool Ended; // turn_finished or turn_failed was read: nothing is left running
            public IParleyStream Current; // the connection being read
        }

        // The stream broke (EOF before the turn's end, a read error, silence): what a resume is for.
        sealed class StreamBroke : Exception
        {
            public StreamBroke(string message, Exception inner = null) : base(message, inner) { }
        }

        ParleyRequest Request(string method, string url, string jsonBody, TimeSpan timeout)
        {
            var request = new ParleyRequest { Method = method, Url = url, Body = jsonBody, Timeout = timeout };
            if (!string.IsNullOrEmpty(token))
                request.Headers.Add(new KeyValuePair<string, string>("Authorization", "Bearer " + token));
            return request;
        }

        ParleyRequest StreamRequest(string method, string url, string jsonBody, TimeSpan timeout)
        {
            var request = Request(method, url, jsonBody, timeout);
            request.Headers.Add(new KeyValuePair<string, string>("Accept", "text/event-stream"));
            return request;
        }

        static bool Succeeded(int status) { return status >= 200 && status < 300; }

        async Task<TurnResult> Stream(string sessionId, string route, string body, RunState state,
                                      Func<ToolRequest, Task<string>> tools, Action<TurnEvent> onEvent, CancellationToken cancel)
        {
            cancel.ThrowIfCancellationRequested();
            var request = StreamRequest("POST", baseUrl + S(sessionId) + route, body, Timeout.InfiniteTimeSpan);
            IParleyStream response;
            try
            {
                response = await transport.Open(request, cancel);
            }
            catch (ParleyTransportException e)
            {
                var none = NoAnswer(e);
                // Never reached: the turn never began. A connection that was made and broke before the answer
                // is a stream broken before it named its run.
                if (none.Code != "server_gone") throw none;
                throw await Unresumed(sessionId, state, new StreamBroke(none.Message, e));
            }
            if (!Succeeded(response.Status))
            {
                using (response) throw Failure(response.Status, await response.ReadToEnd());
            }
            state.Current = response;
            // The run, named before any event arrives: a stream that breaks before its first event still resumes.
            if (state.Run == null)
            {
                var named = response.Header(RunHeader);
                if (!string.IsNullOrEmpty(named)) state.Run = named;
            }
            var answers = new List<Task>();
            var stopped = new TaskCompletionSource<bool>(); // the token's cancel has its answer
            int fired = 0;
            TurnResult result = null;
            Exception failure = null;
            // A cancelled token asks the server to stop the turn, whose stream then ends with turn_failed;
            // closing the stream after the answer ends the read even if the server says no more.
            // (Closing it first would be slower: the handler first drains the response for 2 s.)
            using (cancel.Register(() =>
            {
                Interlocked.Exchange(ref fired, 1);
                Cancel(sessionId).ContinueWith(t =>
                {
                    var ignored = t.Exception;
                    stopped.TrySetResult(true);
                    var current = Volatile.Read(ref state.Current);
                    if (current != null) current.Dispose();
                }, TaskContinuationOptions.ExecuteSynchronously); // not on the thread pool: WebGL has none
            }))
            {
                try
                {
                    while (true)
                    {
                        using (response)
                        {
                            try
                            {
                                result = await Read(response, sessionId, state, tools, onEvent, answers);
                                break;
                            }
                            catch (StreamBroke e)
                            {
                                if (Volatile.Read(ref fired) == 1 || state.NoResume || state.Run == null) throw;
                                failure = e;
                            }
                        }
                        // Not ConfigureAwait(false): the callbacks go on running on the caller's context.
                        response = await Resume(sessionId, state, cancel, (StreamBroke)failure);
                        Volatile.Write(ref state.Current, response);
                        failure = null;
                    }
                }
                catch (Exception e)
                {
                    failure = e;
                }
                finally
                {
                    foreach (var t in answers) Observe(t);
                }
            } // (disposing the registration waits for a callback that is running)
            if (Volatile.Read(ref fired) == 1)
            {
                // Wait for the cancel's answer, so that it cannot stop the caller's next turn.
                await stopped.Task;
                if (result != null) return result; // the turn had finished before the cancel came
                throw new OperationCanceledException("the turn was cancelled", failure, cancel);
            }
            if (result != null) return result;
            var known = failure as ParleyException;
            if (failure is StreamBroke) throw await Unresumed(sessionId, state, (StreamBroke)failure);
            if (!state.Ended && !(known != null && (known.Code == "turn_lost" || known.Code == "server_gone")))
            {
                // The turn may still run (a callback threw): stop it, and wait for the answer, so that a late
                // cancel cannot stop the caller's next turn.
                try
                {
                    await Cancel(sessionId);
                }
                catch (ParleyException) { } // the server is gone or the session with it: nothing to stop
            }
            ExceptionDispatchInfo.Capture(failure).Throw();
            throw failure; // not reached
        }

        // The error of a turn whose stream broke and is not resumed: asked with cancelOnDisconnect (the server
        // cancels the turn), or broken before any event named its run. Then the turn may run on unseen: it is
        // cancelled, and waited for so that a late cancel cannot stop the caller's next turn. That cancel is the
        // reconnect that tells a server gone (server_gone) from a connection that broke (stream_ended).
        async Task<ParleyException> Unresumed(string sessionId, RunState state, StreamBroke broke)
        {
            if (!state.NoResume)
            {
                try
                {
                    await Cancel(sessionId);
                }
                catch (ParleyException e) when (e.Code == "unavailable" || e.Code == "server_gone")
                {
                    return Gone(state, "the turn's stream broke (" + broke.Message + "), and reconnecting failed: "
                                + e.Message, broke);
                }
                catch (ParleyException) { } // the session is gone: nothing to stop
            }
            return new ParleyException("stream_ended", "the turn's stream broke: " + broke.Message, 0, null,
                                       "", "", broke, "", state.Line);
        }

        // The rest of the run after its event state.Seen, from the resume route; tried again after a short,
        // doubling delay while no server answers (or one answers 5xx). turn_lost when a server answers that it
        // does not know the run (the one that ran it stopped before the turn finished), or the last try was
        // answered 5xx (a balancer with no server for it); server_gone when the last try reached no server.
        async Task<IParleyStream> Resume(string sessionId, RunState state, CancellationToken cancel, StreamBroke broke)
        {
            int tries = Math.Max(1, ResumeTries);
            string why = broke.Message;
            bool answered = false; // the last try had an HTTP answer (which said no)
            while (true)
            {
                int attempt = state.Attempts++;
                if (attempt >= tries)
                {
                    if (answered) throw Lost(state, tries + " tries to resume it were answered: " + why, null);
                    throw Gone(state, "no try of " + tries + " to resume the turn reached it: " + why, null);
                }
                if (attempt > 0)
                    await transport.Delay(TimeSpan.FromMilliseconds(ResumeDelay.TotalMilliseconds * (1 << Math.Min(attempt - 1, 16))),
                                          cancel);
                var request = StreamRequest("GET", baseUrl + S(sessionId) + "/runs/" + Uri.EscapeDataString(state.Run)
                                            + "/events", null, RequestTimeout);
                request.Headers.Add(new KeyValuePair<string, string>("Last-Event-ID", state.Run + "." + state.Seen));
                IParleyStream response;
                try
                {
                    response = await transport.Open(request, cancel);
                }
                catch (Exception e) when (!cancel.IsCancellationRequested)
                {
                    why = e.Message + (e.InnerException != null ? " (" + e.InnerException.Message + ")" : "");
                    answered = false;
                    continue; // no answer (refused, reset, timed out): try again
                }
                if (Succeeded(response.Status)) return response;
                int status = response.Status;
                string text;
                using (response) text = await response.ReadToEnd();
                var error = Failure(status, text);
                if (error.Code == "unknown_run") throw Lost(state, "the server does not know it any more", error);
                why = error.Message;
                answered = true;
                if (status >= 500 || status == 429 || error.Code.StartsWith("http_", StringComparison.Ordinal)) continue;
                throw new ParleyException(error.Code, error.Message.Substring(error.Code.Length + 2), status, error.Problems,
                                          "", "", null, "", state.Line);
            }
        }

        static ParleyException Lost(RunState state, string why, Exception inner)
        {
            return new ParleyException("turn_lost", "the server stopped before the turn finished (" + why
                                       + "); say the line again", 0, null, "", "", inner, "", state.Line);
        }

        static ParleyException Gone(RunState state, string why, Exception inner)
        {
            return new ParleyException("server_gone", "the server went away (" + why
                                       + "); say the line again when it is back", 0, null, "", "", inner, "", state.Line);
        }

        // Reads one connection's events to the turn's end (the result, or turn_failed's exception); StreamBroke
        // when the stream breaks first. Events whose id was seen before are skipped.
        async Task<TurnResult> Read(IParleyStream response, string sessionId, RunState state,
                                    Func<ToolRequest, Task<string>> tools, Action<TurnEvent> onEvent, List<Task> answers)
        {
            var lines = new SseLineReader();
            var buffer = new byte[8192];
            string kind = "message", id = "";
            var data = new StringBuilder();
            bool hasData = false;
            while (true)
            {
                // No ConfigureAwait(false): the callbacks run on the caller's context (Unity's main thread).
                string line;
                try
                {
                    line = await ReadLine(response, lines, buffer);
                }
                catch (Exception e)
                {
                    throw new StreamBroke(e.Message, e); // reset, aborted, disposed, silent: the connection is gone
                }
                if (line == null)
                    throw new StreamBroke("the turn's stream ended before turn_finished or turn_failed (did the server stop?)");
                if (line.Length == 0)
                {
                    if (hasData && Fresh(state, id))
                    {
                        state.Ended = kind == "turn_finished" || kind == "turn_failed";
                        var result = await Dispatch(sessionId, kind, data.ToString(), id, state, tools, onEvent, answers);
                        if (result != null) return result;
                        if (state.Ended) throw new ParleyException("stream_ended", kind + " had no result", 0);
                    }
                    kind = "message";
                    data.Length = 0;
                    hasData = false;
                    continue;
                }
                if (line[0] == ':') continue; // a comment: the server's keep-alive
                int colon = line.IndexOf(':');
                string field = colon < 0 ? line : line.Substring(0, colon);
                string value = colon < 0 ? "" : line.Substring(colon + 1);
                if (value.StartsWith(" ", StringComparison.Ordinal)) value = value.Substring(1);
                if (field == "event") kind = value;
                else if (field == "id" && value.IndexOf('\0') < 0) id = value;
                else if (field == "data")
                {
                    if (hasData) data.Append('\n');
                    data.Append(value);
                    hasData = true;
                }
            }
        }

        // The next line (null at the stream's end: a line left unfinished there is dropped, as an event with
        // no blank line after it is). The transport throws when nothing comes within StreamIdleTimeout.
        async Task<string> ReadLine(IParleyStream response, SseLineReader lines, byte[] buffer)
        {
            string line;
            while (!lines.TryTake(out line))
            {
                int count = await response.Read(buffer, StreamIdleTimeout);
                if (count <= 0) return null;
                lines.Feed(buffer, count);
            }
            return line;
        }

        // Whether the event with SSE id `id` is new (ids are RUN.N); it then counts as seen.
        static bool Fresh(RunState state, string id)
        {
            int dot = id.LastIndexOf('.');
            long number;
            if (dot <= 0 || !long.TryParse(id.Substring(dot + 1), NumberStyles.None, CultureInfo.InvariantCulture, out number))
                return true;
            string run = id.Substring(0, dot);
            if (state.Run == null) state.Run = run;
            if (run != state.Run) return true;
            if (number <= state.Seen) return false; // had it before the stream broke: never delivered twice
            state.Seen = number;
            state.Attempts = 0;
            return true;
        }

        // One whole event: to onEvent, then a tool answered or the turn's end. Returns the result on turn_finished.
        async Task<TurnResult> Dispatch(string sessionId, string kind, string raw, string id, RunState state,
                                        Func<ToolRequest, Task<string>> tools, Action<TurnEvent> onEvent, List<Task> answers)
        {
            Dictionary<string, object> data;
            try
            {
                data = Json.Obj(Json.Parse(raw));
            }
            catch (FormatException e)
            {
                throw new ParleyException("bad_response", "event " + kind + " has data that is not a JSON object: "
                                          + e.Message, 0, null, "", "", e, "", state.Line);
            }
            if (kind == "turn_started" || kind == "turn_queued")
            {
                var run = Json.Get(data, "run") as string;
                if (state.Run == null && !string.IsNullOrEmpty(run)) state.Run = run;
                if (state.Line.Length == 0) state.Line = Json.Str(data, "line");
            }
            var ev = new TurnEvent(kind, data, raw, id);
            if (onEvent != null) onEvent(ev);
            if (kind == "tool_request" && tools != null)
            {
                var arguments = Json.Get(data, "arguments") as Dictionary<string, object> ?? new Dictionary<string, object>();
                var request = new ToolRequest
                {
                    SessionId = sessionId, Node = Json.Str(data, "node"), Tool = Json.Str(data, "tool"),
                    CallId = Json.Str(data, "call_id"), Arguments = arguments, ArgumentsJson = Json.Write(arguments),
                };
                // a throw ends the turn (Stream stops it) and comes out of Turn; no ConfigureAwait(false): the
                // events after it go on to onEvent on the caller's context
                string result = await tools(request);
                answers.Add(ToolResult(sessionId, request.CallId, result)); // not awaited: the stream reads on
            }
            else if (kind == "turn_finished")
            {
                var result = new TurnResult
                {
                    Turn = (int)Json.Long(data, "turn"), TurnId = Json.Long(data, "turn_id"), Reply = Json.Str(data, "reply"),
                    Diagnostics = Json.Get(data, "diagnostics") as Dictionary<string, object>, Data = data,
                };
                var path = Json.Get(data, "path") as List<object>;
                if (path != null) foreach (var p in path) result.Path.Add(p as string ?? "");
                var guard = Json.Get(data, "guard") as Dictionary<string, object>; // absent from an older server
                if (guard != null)
                {
                    result.GuardPolicy = Json.Str(guard, "policy");
                    result.GuardExit = Json.Str(guard, "exit");
                    result.GuardNode = Json.Str(guard, "node");
                }
                var gameEvents = Json.Get(data, "game_events") as List<object>;
                if (gameEvents != null) foreach (var name in gameEvents) result.GameEvents.Add(name as string ?? "");
                var tags = Json.Get(data, "tags") as Dictionary<string, object>; // absent unless the asset has reply_tags
                if (tags != null) foreach (var tag in tags) result.Tags[tag.Key] = tag.Value as string ?? Json.Write(tag.Value);
                return result;
            }
            else if (kind == "turn_failed")
            {
                var error = Json.Get(data, "error") as Dictionary<string, object> ?? new Dictionary<string, object>();
                var line = Json.Get(data, "line") as string;
                throw new ParleyException(Json.Str(error, "code"), Json.Str(error, "message"), 0, null,
                                          Json.Str(error, "node"), Json.Str(error, "field"), null,
                                          Json.Str(error, "model"), line ?? state.Line);
            }
            return null;
        }

        // --- plumbing --------------------------------------------------------------------------------------

        static string S(string sessionId)
        {
            if (string.IsNullOrEmpty(sessionId)) throw new ArgumentException("a session id is needed", "sessionId");
            return "/sessions/" + Uri.EscapeDataString(sessionId);
        }

        // One ordinary request: its JSON answer (null for 204), or a ParleyException with the server's code.
        // A GET, PUT or DELETE (idempotent: sent twice, it does what it did once) whose connection broke before
        // the answer is sent once more, on a new connection: the first may have gone out on a kept-alive one the
        // server had just closed; if that one cannot connect, the server is gone (server_gone). A POST or PATCH
        // is never sent twice: whether it was done is unknown (server_gone). No connection at all: unavailable.
        async Task<object> Send(string method, string path, string jsonBody)
        {
            bool idempotent = method == "GET" || method == "PUT" || method == "DELETE";
            for (int attempt = 1; ; attempt++)
            {
                try
                {
                    return await SendOnce(method, path, jsonBody).ConfigureAwait(false);
                }
                catch (ParleyException e) when (idempotent && attempt == 1 && e.Code == "server_gone")
                {
                }
                catch (ParleyException e) when (attempt == 2 && e.Code == "unavailable")
                {
                    throw new ParleyException("server_gone", method + " " + path + ": its connection broke, and "
                                              + "reconnecting failed: " + e.Message, 0, null, "", "", e);
                }
            }
        }

        async Task<object> SendOnce(string method, string path, string jsonBody)
        {
            ParleyAnswer answer;
            try
            {
                answer = await transport.Send(Request(method, baseUrl + path, jsonBody, RequestTimeout)).ConfigureAwait(false);
            }
            catch (ParleyTransportException e) when (e.Failure == TransportFailure.TimedOut)
            {
                throw new ParleyException("timeout", method + " " + path + " had no answer in "
                                          + RequestTimeout.TotalSeconds + " s", 0, null, "", "", e);
            }
            catch (ParleyTransportException e)
            {
                throw NoAnswer(e);
            }
            int status = answer.Status;
            string text = answer.Body;
            if (!Succeeded(status)) throw Failure(status, text);
            if (status == 204 || text.Length == 0) return null;
            try
            {
                return Json.Parse(text);
            }
            catch (FormatException e)
            {
                throw new ParleyException("bad_response", method + " " + path + " answered what is not JSON: "
                                          + e.Message, status, null, "", "", e);
            }
        }

        static ParleyException Failure(int status, string text)
        {
            try
            {
                var error = Json.Obj(Json.Get(Json.Obj(Json.Parse(text)), "error"));
                return new ParleyException(Json.Str(error, "code"), Json.Str(error, "message"), status,
                                           Json.Get(error, "problems") as List<object>);
            }
            catch (FormatException)
            {
                var shown = text.Length > 200 ? text.Substring(0, 200) + "..." : text;
                return new ParleyException("http_" + status, "the server answered " + status + ": " + shown, status);
            }
        }

        // A request no server answered: unavailable when no connection was made (refused, no such host), so
        // nothing reached the server; server_gone when one was made and broke before the answer.
        ParleyException NoAnswer(ParleyTransportException e)
        {
            string why = e.Message + (e.InnerException != null ? " (" + e.InnerException.Message + ")" : "");
            if (e.Failure == TransportFailure.NotConnected)
                return new ParleyException("unavailable", "cannot reach " + baseUrl + ": " + why, 0, null, "", "", e);
            return new ParleyException("server_gone", "the connection to " + baseUrl + " broke before the answer: " + why,
                                       0, null, "", "", e);
        }

        // A request nobody awaits must still have its exception looked at, or it is reported as unobserved.
        internal static void Observe(Task task)
        {
            task.ContinueWith(t => { var ignored = t.Exception; },
                              TaskContinuationOptions.OnlyOnFaulted | TaskContinuationOptions.ExecuteSynchronously);
        }
    }

#if !(UNITY_WEBGL && !UNITY_EDITOR)
    /// <summary>The transport on System.Net.Http's HttpClient: any .NET, and Unity outside a WebGL player.</summary>
    public sealed class HttpClientTransport : IParleyTransport
    {
        readonly HttpClient http;
        string limitedHost; // the host whose connection limit was raised

        public HttpClientTransport(HttpMessageHandler handler = null)
        {
            http = handler != null ? new HttpClient(handler) : new HttpClient();
            http.Timeout = Timeout.InfiniteTimeSpan; // streams are open for as long as a turn runs
            http.DefaultRequestHeaders.ExpectContinue = false; // .NET Framework's handler would wait for a 100 first
        }

        public void Dispose() { http.Dispose(); }

        HttpRequestMessage Message(ParleyRequest request)
        {
            var uri = new Uri(request.Url);
            if (limitedHost != uri.Authority)
            {
                try
                {
                    // Handlers built on HttpWebRequest (.NET Framework's, older Mono's) allow 2 connections per
                    // host: a turn's stream, its tool result and a cancel need 3. (Elsewhere this has no effect.)
                    var point = ServicePointManager.FindServicePoint(uri);
                    point.ConnectionLimit = Math.Max(point.ConnectionLimit, 16);
                }
                catch (Exception) { }
                limitedHost = uri.Authority;
            }
            var message = new HttpRequestMessage(new HttpMethod(request.Method), uri);
            foreach (var header in request.Headers) message.Headers.TryAddWithoutValidation(header.Key, header.Value);
            if (request.Body != null) message.Content = new StringContent(request.Body, Encoding.UTF8, "application/json");
            return message;
        }

        public async Task<ParleyAnswer> Send(ParleyRequest request)
        {
            var message = Message(request);
            using (var timeout = new CancellationTokenSource(request.Timeout))
            {
                HttpResponseMessage response;
                string text;
                try
                {
                    response = await http.SendAsync(message, HttpCompletionOption.ResponseContentRead, timeout.Token)
                        .ConfigureAwait(false);
                    text = response.Content == null ? "" : await response.Content.ReadAsStringAsync().ConfigureAwait(false);
                }
                catch (HttpRequestException e)
                {
                    throw Unanswered(e);
                }
                catch (OperationCanceledException e)
                {
                    throw new ParleyTransportException(TransportFailure.TimedOut, "no answer in "
                                                       + request.Timeout.TotalSeconds + " s", e);
                }
                using (response) return new ParleyAnswer((int)response.StatusCode, text);
            }
        }

        public async Task<IParleyStream> Open(ParleyRequest request, CancellationToken cancel)
        {
            var message = Message(request);
            // Its own connection, closed after: a stream left mid-turn must not go back to the pool half
            // read (Mono 6.8's handler reused one, and the next request read the rest of the stream).
            message.Headers.ConnectionClose = true;
            using (var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancel))
            {
                if (request.Timeout != Timeout.InfiniteTimeSpan) timeout.CancelAfter(request.Timeout);
                try
                {
                    // not ConfigureAwait(false): the caller's context carries on (its callbacks run there)
                    return new Stream(await http.SendAsync(message, HttpCompletionOption.ResponseHeadersRead, timeout.Token));
                }
                catch (HttpRequestException e)
                {
                    throw Unanswered(e);
                }
                catch (OperationCanceledException e) when (!cancel.IsCancellationRequested)
                {
                    throw new ParleyTransportException(TransportFailure.TimedOut, "no answer in "
                                                       + request.Timeout.TotalSeconds + " s", e);
                }
            }
        }

        public Task Delay(TimeSpan delay, CancellationToken cancel) { return Task.Delay(delay, cancel); }

        sealed class Stream : IParleyStream
        {
            readonly HttpResponseMessage response;
            System.IO.Stream body;

            public Stream(HttpResponseMessage response) { this.response = response; }

            public int Status { get { return (int)response.StatusCode; } }

            public string Header(string name)
            {
                IEnumerable<string> values;
                if (!response.Headers.TryGetValues(name, out values)) return null;
                foreach (var value in values) return value;
                return null;
            }

            public void Dispose() { response.Dispose(); }

            public Task<string> ReadToEnd() { return response.Content.ReadAsStringAsync(); }

            public async Task<int> Read(byte[] buffer, TimeSpan silence)
            {
                if (body == null) body = await response.Content.ReadAsStreamAsync();
                var next = body.ReadAsync(buffer, 0, buffer.Length);
                if (next.IsCompleted || silence <= TimeSpan.Zero || silence == Timeout.InfiniteTimeSpan) return await next;
                using (var quiet = new CancellationTokenSource())
                {
                    var waited = Task.Delay(silence, quiet.Token);
                    if (await Task.WhenAny(next, waited) != next)
                    {
                        ParleyClient.Observe(next);
                        response.Dispose(); // the read in flight ends with it
                        throw new ParleyTransportException(TransportFailure.TimedOut, "the stream sent nothing for "
                                                           + silence.TotalSeconds + " s");
                    }
                    quiet.Cancel();
                }
                return await next;
            }
        }

        static ParleyTransportException Unanswered(HttpRequestException e)
        {
            string why = e.Message + (e.InnerException != null ? " (" + e.InnerException.Message + ")" : "");
            return new ParleyTransportException(NeverConnected(e) ? TransportFailure.NotConnected : TransportFailure.Broke,
                                                why, e);
        }

        // Whether a failed request says no connection was made. Mono's handlers say it with a SocketException
        // (refused, no such host, ...) or HttpWebRequest's WebException status; one made and broken says it with
        // an IOException, a reset, or another WebException status. Nothing said either way: not connected.
        static bool NeverConnected(Exception e)
        {
            bool broke = false;
            for (var c = e; c != null; c = c.InnerException)
            {
                var socket = c as SocketException;
                if (socket != null)
                {
                    switch (socket.SocketErrorCode)
                    {
                        case SocketError.ConnectionRefused: case SocketError.HostNotFound: case SocketError.HostUnreachable:
                        case SocketError.NetworkUnreachable: case SocketError.TryAgain: case SocketError.NoData:
                        case SocketError.AddressNotAvailable: case SocketError.NetworkDown:
                            return true;
                    }
                    broke = true;
                }
                var web = c as WebException;
                if (web != null)
                {
                    if (web.Status == WebExceptionStatus.ConnectFailure || web.Status == WebExceptionStatus.NameResolutionFailure
                        || web.Status == WebExceptionStatus.ProxyNameResolutionFailure)
                        return true;
                    broke = true;
                }
                if (c is IOException) broke = true;
            }
            return !broke;
        }

    }
#endif

    /// <summary>A small JSON reader and writer for the protocol's values (RFC 8259). Parse gives
    /// Dictionary&lt;string, object&gt;, List&lt;object&gt;, string, long, double, bool or null; Write takes those,
    /// any IDictionary with string keys, any IEnumerable, and the other number types. Bad text: FormatException.</summary>
    public static class Json
    {
        public static object Parse(string text)
        {
            if (text == null) throw new FormatException("no JSON text (null)");
            int i = 0;
            object value = Value(text, ref i, 0);
            Space(text, ref i);
            if (i != text.Length) throw Bad(text, i, "more after the JSON value");
            return value;
        }

        public static string Write(object value)
        {
            var sb = new StringBuilder();
            Write(sb, value, 0);
            return sb.ToString();
        }

        // --- reading a parsed value (missing or of another type: a clear FormatException) ---

        public static Dictionary<string, object> Obj(object value)
        {
            var o = value as Dictionary<string, object>;
            if (o == null) throw new FormatException("expected a JSON object, got " + Describe(value));
            return o;
        }

        public static List<object> Arr(object value)
        {
            var a = value as List<object>;
            if (a == null) throw new FormatException("expected a JSON array, got " + Describe(value));
            return a;
        }

        public static object Get(Dictionary<string, object> o, string key)
        {
            object v;
            return o.TryGetValue(key, out v) ? v : null;
        }

        public static string Str(Dictionary<string, object> o, string key)
        {
            var v = Get(o, key);
            return v == null ? "" : v as string ?? Write(v);
        }

        public static long Long(Dictionary<string, object> o, string key)
        {
            var v = Get(o, key);
            if (v is long) return (long)v;
            if (v is double && Math.Floor((double)v) == (double)v) return (long)(double)v;
            throw new FormatException("expected a whole number at \"" + key + "\", got " + Describe(v));
        }

        public static double Double(Dictionary<string, object> o, string key)
        {
            var v = Get(o, key);
            if (v is double) return (double)v;
            if (v is long) return (long)v;
            throw new FormatException("expected a number at \"" + key + "\", got " + Describe(v));
        }

        public static bool Bool(Dictionary<string, object> o, string key)
        {
            var v = Get(o, key);
            if (v is bool) return (bool)v;
            throw new FormatException("expected true or false at \"" + key + "\", got " + Describe(v));
        }

        static string Describe(object v)
        {
            return v == null ? "null" : v is string ? "a string" : v is List<object> ? "an array"
                 : v is Dictionary<string, object> ? "an object" : v.GetType().Name;
        }

        // --- the reader ---

        const int MaxDepth = 256; // deeper is refused, not a stack overflow

        static FormatException Bad(string s, int i, string what)
        {
            return new FormatException("bad JSON at character " + i + ": " + what);
        }

        static void Space(string s, ref int i)
        {
            while (i < s.Length && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
        }

        static object Value(string s, ref int i, int depth)
        {
            if (depth > MaxDepth) throw Bad(s, i, "nested deeper than " + MaxDepth);
            Space(s, ref i);
            if (i >= s.Length) throw Bad(s, i, "the text ends where a value should be");
            char c = s[i];
            if (c == '{')
            {
                var o = new Dictionary<string, object>();
                i++;
                Space(s, ref i);
                if (i < s.Length && s[i] == '}') { i++; return o; }
                while (true)
                {
                    Space(s, ref i);
                    if (i >= s.Length || s[i] != '"') throw Bad(s, i, "expected a key in quotes");
                    string key = String(s, ref i);
                    Space(s, ref i);
                    if (i >= s.Length || s[i] != ':') throw Bad(s, i, "expected ':' after a key");
                    i++;
                    o[key] = Value(s, ref i, depth + 1);
                    Space(s, ref i);
                    if (i < s.Length && s[i] == ',') { i++; continue; }
                    if (i < s.Length && s[i] == '}') { i++; return o; }
                    throw Bad(s, i, "expected ',' or '}'");
                }
            }
            if (c == '[')
            {
                var a = new List<object>();
                i++;
                Space(s, ref i);
                if (i < s.Length && s[i] == ']') { i++; return a; }
                while (true)
                {
                    a.Add(Value(s, ref i, depth + 1));
                    Space(s, ref i);
                    if (i < s.Length && s[i] == ',') { i++; continue; }
                    if (i < s.Length && s[i] == ']') { i++; return a; }
                    throw Bad(s, i, "expected ',' or ']'");
                }
            }
            if (c == '"') return String(s, ref i);
            if (Word(s, ref i, "true")) return true;
            if (Word(s, ref i, "false")) return false;
            if (Word(s, ref i, "null")) return null;
            if (c == '-' || (c >= '0' && c <= '9')) return Number(s, ref i);
            throw Bad(s, i, "unexpected '" + c + "'");
        }

        static bool Word(string s, ref int i, string word)
        {
            if (string.CompareOrdinal(s, i, word, 0, word.Length) != 0) return false;
            i += word.Length;
            return true;
        }

        static object Number(string s, ref int i)
        {
            int start = i;
            bool whole = true;
            if (s[i] == '-') i++;
            if (i < s.Length && s[i] == '0') i++;
            else if (i < s.Length && s[i] >= '1' && s[i] <= '9') Digits(s, ref i);
            else throw Bad(s, i, "a number needs digits");
            if (i < s.Length && s[i] == '.')
            {
                whole = false;
                i++;
                if (i >= s.Length || s[i] < '0' || s[i] > '9') throw Bad(s, i, "digits must follow '.'");
                Digits(s, ref i);
            }
            if (i < s.Length && (s[i] == 'e' || s[i] == 'E'))
            {
                whole = false;
                i++;
                if (i < s.Length && (s[i] == '+' || s[i] == '-')) i++;
                if (i >= s.Length || s[i] < '0' || s[i] > '9') throw Bad(s, i, "digits must follow the exponent");
                Digits(s, ref i);
            }
            string text = s.Substring(start, i - start);
            long l;
            if (whole && long.TryParse(text, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out l)) return l;
            // (Mono's double.Parse can be one unit in the last place off for exponents past 1e-200 or so;
            // nothing in the protocol comes near.)
            double d = double.Parse(text, NumberStyles.Float, CultureInfo.InvariantCulture);
            return d == 0 && text[0] == '-' ? -0.0 : d; // Mono's parse drops the sign of -0.0
        }

        static void Digits(string s, ref int i)
        {
            while (i < s.Length && s[i] >= '0' && s[i] <= '9') i++;
        }

        static string String(string s, ref int i)
        {
            i++; // the opening quote
            var sb = new StringBuilder();
            while (true)
            {
                if (i >= s.Length) throw Bad(s, i, "a string is not closed");
                char c = s[i++];
                if (c == '"') return sb.ToString();
                if (c < ' ') throw Bad(s, i - 1, "a control character inside a string");
                if (c != '\\') { sb.Append(c); continue; }
                if (i >= s.Length) throw Bad(s, i, "a string ends in '\\'");
                char e = s[i++];
                switch (e)
                {
                    case '"': sb.Append('"'); break;
                    case '\\': sb.Append('\\'); break;
                    case '/': sb.Append('/'); break;
                    case 'b': sb.Append('\b'); break;
                    case 'f': sb.Append('\f'); break;
                    case 'n': sb.Append('\n'); break;
                    case 'r': sb.Append('\r'); break;
                    case 't': sb.Append('\t'); break;
                    case 'u':
                        // Surrogate pairs arrive as two \u escapes; each is one UTF-16 unit, so appending them
                        // in order rebuilds the character.
                        if (i + 4 > s.Length) throw Bad(s, i, "\\u needs four hex digits");
                        int code;
                        if (!int.TryParse(s.Substring(i, 4), NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture,
                                          out code))
                            throw Bad(s, i, "\\u needs four hex digits");
                        sb.Append((char)code);
                        i += 4;
                        break;
                    default: throw Bad(s, i - 1, "unknown escape '\\" + e + "'");
                }
            }
        }

        // --- the writer ---

        static void Write(StringBuilder sb, object v, int depth)
        {
            if (depth > MaxDepth) throw new FormatException("a value nested deeper than " + MaxDepth + " (a cycle?)");
            if (v == null) { sb.Append("null"); return; }
            var str = v as string;
            if (str != null) { Quote(sb, str); return; }
            if (v is bool) { sb.Append((bool)v ? "true" : "false"); return; }
            if (v is char) { Quote(sb, v.ToString()); return; }
            if (v is double || v is float)
            {
                double d = Convert.ToDouble(v, CultureInfo.InvariantCulture);
                if (double.IsNaN(d) || double.IsInfinity(d)) throw new FormatException("JSON has no NaN or infinity");
                if (d == 0) { sb.Append(BitConverter.DoubleToInt64Bits(d) < 0 ? "-0.0" : "0.0"); return; }
                var text = d.ToString("R", CultureInfo.InvariantCulture);
                // .NET Framework's "R" does not always give back the same double; 17 digits always do.
                if (double.Parse(text, CultureInfo.InvariantCulture) != d) text = d.ToString("G17", CultureInfo.InvariantCulture);
                // "R" may give 1E+20: valid JSON. A whole double stays a number with a point so it reads back a double.
                sb.Append(text.IndexOfAny(new[] { '.', 'E', 'e' }) < 0 ? text + ".0" : text);
                return;
            }
            if (v is int || v is long || v is short || v is byte || v is sbyte || v is uint || v is ulong || v is ushort
                || v is decimal)
            {
                sb.Append(Convert.ToString(v, CultureInfo.InvariantCulture));
                return;
            }
            var dict = v as IDictionary;
            if (dict != null)
            {
                sb.Append('{');
                bool first = true;
                foreach (DictionaryEntry entry in dict)
                {
                    var key = entry.Key as string;
                    if (key == null) throw new FormatException("a JSON object's keys must be strings");
                    if (!first) sb.Append(',');
                    first = false;
                    Quote(sb, key);
                    sb.Append(':');
                    Write(sb, entry.Value, depth + 1);
                }
                sb.Append('}');
                return;
            }
            var pairs = v as IEnumerable<KeyValuePair<string, object>>; // an IDictionary<string, object> of another kind
            if (pairs != null)
            {
                var copy = new Dictionary<string, object>();
                foreach (var pair in pairs) copy[pair.Key] = pair.Value;
                Write(sb, copy, depth);
                return;
            }
            var list = v as IEnumerable;
            if (list != null)
            {
                sb.Append('[');
                bool first = true;
                foreach (var item in list)
                {
                    if (!first) sb.Append(',');
                    first = false;
                    Write(sb, item, depth + 1);
                }
                sb.Append(']');
                return;
            }
            throw new FormatException("cannot write a " + v.GetType().Name + " as JSON");
        }

        static void Quote(StringBuilder sb, string s)
        {
            sb.Append('"');
            for (int i = 0; i < s.Length; i++)
            {
                char c = s[i];
                switch (c)
                {
                    case '"': sb.Append("\\\""); break;
                    case '\\': sb.Append("\\\\"); break;
                    case '\n': sb.Append("\\n"); break;
                    case '\r': sb.Append("\\r"); break;
                    case '\t': sb.Append("\\t"); break;
                    case '\b': sb.Append("\\b"); break;
                    case '\f': sb.Append("\\f"); break;
                    default:
                        bool pair = char.IsHighSurrogate(c) && i + 1 < s.Length && char.IsLowSurrogate(s[i + 1]);
                        if (pair) { sb.Append(c).Append(s[++i]); break; }
                        // Control characters must be escaped, and a lone surrogate would not survive UTF-8
                        // (it would become U+FFFD); everything else goes as it is, the body being UTF-8.
                        if (c < ' ' || char.IsSurrogate(c))
                            sb.Append("\\u").Append(((int)c).ToString("x4", CultureInfo.InvariantCulture));
                        else sb.Append(c);
                        break;
                }
            }
            sb.Append('"');
        }
    }
}
