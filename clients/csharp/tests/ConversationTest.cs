// The C# client's test: a whole scripted conversation against a running `parley serve`.
//   mono ConversationTest.exe URL scripted   (--backend scripted, --assets resources/examples)
//   mono ConversationTest.exe URL model      (the embedded backend on the sample model)
//   mono ConversationTest.exe URL resume     (URL: tests/clients/cutting_proxy.py before a scripted server;
//                                             PARLEY_OTHER_URL: a second one, PARLEY_SUFFIX: ends the session ids)
//   mono ConversationTest.exe URL gone       (a scripted server that POST PARLEY_KILL_URL kills, mid-turn:
//                                             tests/clients/kill_switch.py; PARLEY_CLOSED_URL: a closed port)
// PARLEY_TOKEN: the server's token (PARLEY_SERVE_TOKEN), when it has one.
// PARLEY_HANDLER=webrequest: HTTP through HttpWebRequest, as .NET Framework and older Monos do (Mono 6.8's
// HttpClientHandler has that handler inside but picks SocketsHttpHandler).
// Prints "ok NAME" for each check that passed; on the first failure prints "FAIL ..." and exits 1.
// tests/clients/test_csharp_client.py builds and runs it.

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Net.Http;
using System.Reflection;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Parley;

static class ConversationTest
{
    static readonly TimeSpan Deadline = TimeSpan.FromSeconds(60);

    static int Main(string[] args)
    {
        if (args.Length != 2 || (args[1] != "scripted" && args[1] != "model" && args[1] != "resume" && args[1] != "gone"
                                  && args[1] != "shutdown" && args[1] != "protocol"))
        {
            Console.Error.WriteLine("usage: ConversationTest.exe URL scripted|model|resume|gone|shutdown|protocol");
            return 2;
        }
        try
        {
            if (args[1] == "scripted")
            {
                JsonChecks();
                Scripted(args[0]).GetAwaiter().GetResult();
                MainThread.Run(() => OnMainThread(args[0]));
            }
            else if (args[1] == "resume")
                MainThread.Run(() => Resume(args[0], Environment.GetEnvironmentVariable("PARLEY_SUFFIX") ?? ".cs"));
            else if (args[1] == "gone") Gone(args[0]).GetAwaiter().GetResult();
            else if (args[1] == "shutdown") Shutdown(args[0]).GetAwaiter().GetResult();
            // the protocol test set (clients/protocol), by the driver the Unity package's test runs, over HttpClient
            else if (args[1] == "protocol")
                MainThread.Run(() => ProtocolDriver.Run(() => new HttpClientTransport(Handler()), Console.Out));
            else Model(args[0]).GetAwaiter().GetResult();
            Console.WriteLine("all passed");
            return 0;
        }
        catch (Exception e)
        {
            Console.WriteLine("FAIL " + e);
            return 1;
        }
    }

    static void Check(bool condition, string what)
    {
        if (!condition) throw new Exception("check failed: " + what);
    }

    static void Ok(string name) { Console.WriteLine("ok " + name); }

    static async Task<T> Within<T>(Task<T> task, string what)
    {
        if (await Task.WhenAny(task, Task.Delay(Deadline)) != task) throw new TimeoutException(what + ": no answer in " + Deadline);
        return await task;
    }

    static async Task<ParleyException> Fails(Func<Task> call, string what)
    {
        try
        {
            await call();
        }
        catch (ParleyException e)
        {
            return e;
        }
        throw new Exception(what + ": expected a ParleyException, got none");
    }

    // The session is idle again (a cancelled turn's worker lets go of it just after the stream ends).
    static async Task<SessionInfo> Idle(ParleyClient client, string id)
    {
        var until = DateTime.UtcNow + Deadline;
        while (true)
        {
            var s = await client.GetSession(id);
            if (!s.Busy) return s;
            if (DateTime.UtcNow > until) throw new TimeoutException("session " + id + " still busy");
            await Task.Delay(20);
        }
    }

    static void JsonChecks()
    {
        var o = Json.Obj(Json.Parse(
            " {\"s\": \"a\\\"b\\\\c\\/d\\n\\t\\u00e9\\ud83c\\udff9\", \"n\": -12, \"big\": 12345678901234, "
            + "\"f\": 2.5e-3, \"e\": 1E2, \"t\": true, \"no\": false, \"z\": null, \"a\": [1, [], {}], \"u\": \"\u00fc\" } "));
        Check(Json.Str(o, "s") == "a\"b\\c/d\n\t\u00e9\ud83c\udff9", "string escapes");
        Check((long)o["n"] == -12 && (long)o["big"] == 12345678901234L, "integers are long");
        Check((double)o["f"] == 0.0025 && (double)o["e"] == 100.0, "fractions and exponents are double");
        Check((bool)o["t"] && !(bool)o["no"] && o.ContainsKey("z") && o["z"] == null, "true, false, null");
        var a = Json.Arr(o["a"]);
        Check(a.Count == 3 && (long)a[0] == 1 && Json.Arr(a[1]).Count == 0 && Json.Obj(a[2]).Count == 0, "nested arrays");
        Check(Json.Str(o, "u") == "\u00fc", "raw UTF-16 text");

        var back = Json.Obj(Json.Parse(Json.Write(o)));
        Check(Json.Write(back) == Json.Write(o), "write then parse gives the same value");
        Check(Json.Str(back, "s") == Json.Str(o, "s"), "escapes survive a round trip");
        Check(Json.Write("\u0001\ud800x\ud83c\udff9\u2028") == "\"\\u0001\\ud800x\ud83c\udff9\u2028\"",
              "control characters and lone surrogates escaped, pairs kept: " + Json.Write("\u0001\ud800x\ud83c\udff9"));
        Check(Json.Write(new Dictionary<string, object> { { "x", 1.0 }, { "y", new[] { 1, 2 } }, { "q", 0.1 }, { "m", -0.0 } })
              == "{\"x\":1.0,\"y\":[1,2],\"q\":0.1,\"m\":-0.0}", "doubles, int arrays");
        foreach (var d in new[] { -0.0, 0.0, 1e300, 5e-324, 0.30000000000000004, 116349.1710907335, -1.5e-7, double.MaxValue })
        {
            var text = Json.Write(d);
            Check(BitConverter.DoubleToInt64Bits((double)Json.Parse(text)) == BitConverter.DoubleToInt64Bits(d),
                  "a double written and read back is the same: " + text);
        }
        foreach (var bad in new[] { "", "{", "[1,]", "{\"a\" 1}", "\"abc", "01", "1.", "-", "tru", "\"\\x\"", "\"\\u12\"",
                                    "[1] 2", "{\"a\":1,}", "\"a\tb\"", "nul" })
        {
            bool refused = false;
            try { Json.Parse(bad); }
            catch (FormatException) { refused = true; }
            Check(refused, "bad JSON refused: " + bad);
        }
        Ok("json");
    }

    static readonly string Token = Environment.GetEnvironmentVariable("PARLEY_TOKEN");

    static HttpMessageHandler Handler()
    {
        var name = Environment.GetEnvironmentVariable("PARLEY_HANDLER");
        if (string.IsNullOrEmpty(name)) return null;
        if (name != "webrequest") throw new ArgumentException("PARLEY_HANDLER: webrequest or nothing, not " + name);
        var assembly = typeof(HttpClientHandler).Assembly;
        var inner = assembly.GetType("System.Net.Http.MonoWebRequestHandler", true);
        var wrap = typeof(HttpClientHandler).GetConstructor(BindingFlags.NonPublic | BindingFlags.Instance, null,
                                                            new[] { assembly.GetType("System.Net.Http.IMonoHttpClientHandler", true) }, null);
        Check(wrap != null, "Mono's HttpClientHandler(IMonoHttpClientHandler)");
        return (HttpMessageHandler)wrap.Invoke(new[] { Activator.CreateInstance(inner, true) });
    }

    // What carries the requests inside Mono's HttpClientHandler (the test checks it is the one it asked for).
    static string HandlerName(HttpMessageHandler handler)
    {
        var outer = handler ?? new HttpClientHandler();
        var field = typeof(HttpClientHandler).GetField("_delegatingHandler", BindingFlags.NonPublic | BindingFlags.Instance);
        var inner = field == null ? null : field.GetValue(outer);
        return inner == null ? "unknown" : inner.GetType().Name;
    }

    static async Task Scripted(string url)
    {
        if (!string.IsNullOrEmpty(Token))
        {
            using (var stranger = new ParleyClient(url, null, Handler()))
            {
                var refused = await Fails(() => stranger.Health(), "a request without the token");
                Check(refused.Code == "unauthorized" && refused.Status == 401, "unauthorized: " + refused.Code);
                var turnRefused = await Fails(() => stranger.Turn("anyone", "hello"), "a turn without the token");
                Check(turnRefused.Code == "unauthorized" && turnRefused.Status == 401, "turn unauthorized: " + turnRefused.Code);
            }
            Ok("token required");
        }
        var handler = Handler();
        using (var client = new ParleyClient(url, Token, handler))
        {
            var health = await client.Health();
            Check(health.Status == "ok" && health.Api == "1" && health.Backend.StartsWith("scripted"), "health: " + health.Backend);
            Console.WriteLine("handler: " + HandlerName(handler));
            var assets = (await client.Assets()).Select(x => x.Path).ToList();
            Check(assets.Contains("tool_calling.json") && assets.Contains("chat.json"), "assets: " + string.Join(",", assets));
            Ok("health and assets");

            const string id = "csharp-quartermaster";
            var session = await client.CreateSession("tool_calling.json", null, id);
            Check(session.Id == id && session.Turns == 0 && !session.Busy && session.Asset == "tool_calling.json", "created");
            Check((await client.ListSessions()).Any(x => x.Id == id), "listed");
            Ok("create session");

            // A turn whose tool call the client answers (with text that needs escaping, and a surrogate pair).
            const string answer = "12 arrows \"fletched\" \ud83c\udff9";
            var kinds = new List<string>();
            var requests = new List<ToolRequest>();
            var tokens = 0;
            var shown = new StringBuilder();  // what a subtitle shows: the reply's tokens, never the tool call's JSON
            var inner = new StringBuilder();
            var first = await Within(client.Turn(id, "How many arrows are there?", r => { requests.Add(r); return answer; },
                                                 e => {
                                                     kinds.Add(e.Kind);
                                                     if (e.Kind != "token") return;
                                                     tokens++;
                                                     (e.IsReply ? shown : inner).Append(e.Text("text"));
                                                 }), "turn 1");
            Check(requests.Count == 1 && requests[0].Tool == "check_stock" && requests[0].CallId.Length > 0, "one tool request");
            Check(Json.Str(requests[0].Arguments, "item") == "there" && requests[0].ArgumentsJson == "{\"item\":\"there\"}",
                  "tool arguments: " + requests[0].ArgumentsJson);
            Check(first.Reply.Contains(answer), "the reply holds the tool's answer: " + first.Reply);
            Check(first.Turn == 0 && first.Path.Contains("lookup") && first.Path.Contains("reply"),
                  "turn 0 through lookup and reply: " + string.Join(",", first.Path));
            Check(kinds[0] == "turn_started" && kinds.Contains("tool_request") && kinds.Contains("tool_call")
                  && kinds.IndexOf("tool_request") < kinds.IndexOf("tool_call") && kinds.Last() == "turn_finished"
                  && tokens > 0, "events: " + string.Join(",", kinds));
            Check(shown.ToString() == first.Reply && inner.ToString().Contains("check_stock"),
                  "IsReply marks the reply's tokens only: shown '" + shown + "', inner '" + inner + "'");
            Check((await client.GetSession(id)).Turns == 1, "one turn");
            Check((await client.Turns(id)).Single().Reply == first.Reply, "the turn list has the reply");
            Ok("turn with a tool call");

            // A tool whose answer takes asynchronous work (awaited, then answered), and the coroutine-friendly
            // form (the answer comes later, from elsewhere, through a callback).
            var askedAsync = new List<string>();
            var asyncId = (await client.CreateSession("tool_calling.json")).Id; // its own: the turn counts below stay
            var awaited = await Within(client.Turn(asyncId, "How many arrows are there?", onEvent: null,
                toolsAsync: async r => { askedAsync.Add(r.Tool); await Task.Delay(50); return "40 arrows, awaited"; }),
                "a turn with an async tool");
            Check(askedAsync.SequenceEqual(new[] { "check_stock" }) && awaited.Reply.Contains("40 arrows, awaited"),
                  "the async tool's answer is in the reply: " + awaited.Reply);
            var later = await Within(client.Turn(asyncId, "How many arrows are there?", toolsAsync: ParleyClient.Answered(
                (r, reply) => Task.Delay(50).ContinueWith(_ => reply("30 arrows, called back")))),
                "a turn whose tool answers through a callback");
            Check(later.Reply.Contains("30 arrows, called back"), "the callback's answer is in the reply: " + later.Reply);
            var twoTools = false;
            try { await client.Turn(asyncId, "hi", r => "x", toolsAsync: r => Task.FromResult("y")); }
            catch (ArgumentException) { twoTools = true; }
            Check(twoTools, "tools and toolsAsync together are refused");
            await client.DeleteSession(asyncId);
            Ok("async and callback tools");

            // Two NPCs at once, both waiting for their tool results, answered by hand with ToolResult
            // (needs more than the 2 connections per host that HttpWebRequest allows by default).
            var npcs = new[] { "csharp-guard", "csharp-smith" };
            var asked = npcs.Select(_ => new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously)).ToArray();
            var both = new List<Task<TurnResult>>();
            for (int i = 0; i < npcs.Length; i++)
            {
                var mine = asked[i];
                await client.CreateSession("tool_calling.json", null, npcs[i]);
                both.Add(client.Turn(npcs[i], "How many arrows are there?", null,
                                     e => { if (e.Kind == "tool_request") mine.TrySetResult(e.Text("call_id")); }));
            }
            for (int i = 0; i < npcs.Length; i++)
                await client.ToolResult(npcs[i], await Within(asked[i].Task, "tool_request of " + npcs[i]), npcs[i] + " has 3");
            for (int i = 0; i < npcs.Length; i++)
            {
                var reply = (await Within(both[i], npcs[i] + "'s turn")).Reply;
                Check(reply.Contains(npcs[i] + " has 3"), npcs[i] + "'s reply has its own answer: " + reply);
                await client.DeleteSession(npcs[i]);
            }
            Ok("two sessions at once");

            // A turn cancelled while it waits for its tool result: POST /cancel when the tool_request comes.
            var waiting = new TaskCompletionSource<ToolRequest>(TaskCreationOptions.RunContinuationsAsynchronously);
            string lastKind = null;
            var second = client.Turn(id, "How many arrows are there?", null, e =>
            {
                lastKind = e.Kind;
                if (e.Kind == "tool_request") waiting.TrySetResult(null);
            });
            await Within(waiting.Task, "tool_request of turn 2");
            // (a second line would wait in the queue, the asset's double_text; a regenerate is refused)
            var busy = await Fails(() => client.Regenerate(id, 0), "a regenerate on a busy session");
            Check(busy.Code == "busy" && busy.Status == 409, "busy: " + busy.Code + " " + busy.Status);
            Check(await client.Cancel(id), "cancel says a turn was running");
            var cancelled = await Within(Fails(() => second, "the cancelled turn"), "turn 2");
            Check(cancelled.Code == "cancelled" && cancelled.Status == 0 && lastKind == "turn_failed", "cancelled: " + cancelled.Message);
            Check((await Idle(client, id)).Turns == 1, "a cancelled turn leaves the turn count");
            Check(!await client.Cancel(id), "nothing left to cancel");
            Ok("turn cancelled by POST /cancel");

            // A turn cancelled by its CancellationToken: OperationCanceledException, the session as it was.
            using (var cts = new CancellationTokenSource())
            {
                var third = client.Turn(id, "How many arrows are there?", null, e => { if (e.Kind == "tool_request") cts.Cancel(); },
                                        cts.Token);
                bool threw = false;
                try { await Within(third, "turn 3"); }
                catch (OperationCanceledException) { threw = true; }
                Check(threw, "a cancelled token throws OperationCanceledException");
            }
            Check((await Idle(client, id)).Turns == 1, "a token-cancelled turn leaves the turn count");
            Ok("turn cancelled by its token");

            // A tool that throws: its exception comes out of Turn, and the turn is stopped.
            bool toolThrew = false;
            try
            {
                await Within(client.Turn(id, "How many arrows are there?", r => { throw new InvalidOperationException("no stock"); }),
                             "turn 4");
            }
            catch (InvalidOperationException e) { toolThrew = e.Message == "no stock"; }
            Check(toolThrew, "the tool's exception comes out");
            Check((await Idle(client, id)).Turns == 1, "a failed tool leaves the turn count");
            Ok("tool that throws");

            // The session goes on after all that; history out, rewind, history back in.
            var again = await Within(client.Turn(id, "How many arrows are there?", r => "7"), "turn 5");
            Check(again.Reply.Contains("7") && again.Turn == 1 && (await client.GetSession(id)).Turns == 2, "second turn kept");
            var history = await client.ExportHistory(id);
            Check(Json.Arr(Json.Get(Json.Obj(Json.Parse(history)), "turns")).Count == 2, "history has 2 turns");
            Check((await client.Rewind(id, 1)).Turns == 1, "rewound to 1 turn");
            Check((await client.ImportHistory(id, history)).Turns == 2, "history imported: 2 turns");
            var badHistory = await Fails(() => client.ImportHistory(id, "{\"format\": \"nope\"}"), "a bad history");
            Check(badHistory.Code == "bad_history" && badHistory.Status == 422, "bad_history: " + badHistory.Code);
            Ok("history and rewind");

            // Variables and params on a second NPC (chat.json declares player_name and time_of_day).
            var mira = await client.CreateSession("chat.json", new Dictionary<string, object> { { "player_name", "Ada" } });
            Check(Json.Str(mira.Variables, "player_name") == "Ada", "created with a variable");
            var changed = await client.SetVariables(mira.Id, new Dictionary<string, object> { { "time_of_day", "morning" } });
            Check(Json.Str(changed.Variables, "time_of_day") == "morning" && Json.Str(changed.Variables, "player_name") == "Ada",
                  "variables set: " + Json.Write(changed.Variables));
            var undeclared = await Fails(() => client.SetVariables(mira.Id, new Dictionary<string, object> { { "arrows", 12 } }),
                                         "an undeclared variable");
            Check(undeclared.Code == "bad_request" && undeclared.Status == 400 && undeclared.Message.Contains("arrows"),
                  "bad_request: " + undeclared.Message);
            await client.ChangeParams(mira.Id, new Dictionary<string, object>
            {
                { "reply", new Dictionary<string, object> { { "temperature", 0.4 }, { "max_tokens", 32 }, { "system_prompt", "Be curt." } } },
            });
            var structural = await Fails(() => client.ChangeParams(mira.Id, new Dictionary<string, object>
            {
                { "reply", new Dictionary<string, object> { { "model_name", "other.gguf" } } },
            }), "a structural change");
            Check(structural.Code == "structural_change" && structural.Status == 409, "structural_change: " + structural.Code);
            var hello = await Within(client.Turn(mira.Id, "Good morning!"), "Mira's turn");
            Check(hello.Reply.Length > 0 && hello.Diagnostics != null, "a turn after the changes, with diagnostics");
            await client.DeleteSession(mira.Id);
            Ok("variables and params");

            var unknown = await Fails(() => client.GetSession("no-such-npc"), "an unknown session");
            Check(unknown.Code == "unknown_session" && unknown.Status == 404 && unknown.Message.Contains("no-such-npc"),
                  "unknown_session: " + unknown.Code + " " + unknown.Status);
            var unknownTurn = await Fails(() => client.Turn("no-such-npc", "hello"), "a turn of an unknown session");
            Check(unknownTurn.Code == "unknown_session" && unknownTurn.Status == 404, "turn on unknown_session: " + unknownTurn.Code);
            Ok("typed errors");

            await GuardAndGameEvent(client);
            Ok("guarded turn and game event");

            await client.DeleteSession(id);
            Check((await Fails(() => client.GetSession(id), "a deleted session")).Code == "unknown_session", "deleted");
            Check(!(await client.ListSessions()).Any(x => x.Id == id), "not listed");
            Ok("delete session");
        }
    }

    // What a game reacts to: Mira the herbalist (quest_giver.json) guards the player's line, and her reward is the
    // game event quest_complete, reached once the game's answer to check_inventory says the flowers are there.
    static async Task GuardAndGameEvent(ParleyClient client)
    {
        var mira = await client.CreateSession("quest_giver.json", null, "csharp-herbalist");
        var guarded = new List<TurnEvent>();
        var told = await Within(client.Turn(mira.Id, "(Suddenly her two brothers appear and hand her the moonpetals)", null,
                                            e => { if (e.Kind == "guarded" || e.Kind == "game_event") guarded.Add(e); }),
                                "the narrated line");
        Check(guarded.Count == 1 && guarded[0].Kind == "guarded" && guarded[0].Text("node") == "gate"
              && guarded[0].Text("policy") == "narration" && guarded[0].Text("exit") == "policy:narration"
              && guarded[0].Text("check") == "patterns" && guarded[0].Text("checked") == "line"
              && guarded[0].Text("why").Contains("appear"), "guarded: " + string.Join(" ", guarded.Select(e => e.RawData)));
        Check(told.GuardPolicy == "narration" && told.GuardExit == "policy:narration" && told.GuardNode == "gate"
              && told.GameEvents.Count == 0, "the turn's guard: " + told.GuardPolicy + " " + told.GuardExit);

        var reached = new List<TurnEvent>();
        var done = await Within(client.Turn(mira.Id, "Here, I turn in the moonpetals.",
                                            r => "{\"item\": \"moonpetal\", \"count\": 3}",
                                            e => { if (e.Kind == "game_event") reached.Add(e); }), "the hand-in");
        Check(reached.Count == 1 && reached[0].Text("name") == "quest_complete" && reached[0].Text("node") == "reward"
              && reached[0].Text("exit") == "", "game_event: " + string.Join(" ", reached.Select(e => e.RawData)));
        Check(done.GameEvents.SequenceEqual(new[] { "quest_complete" }), "the turn's game events: " + string.Join(",", done.GameEvents));

        var kinds = new List<string>();
        var plain = await Within(client.Turn(mira.Id, "What do you need from me?", null, e => kinds.Add(e.Kind)), "a plain line");
        Check(!kinds.Contains("guarded") && !kinds.Contains("game_event") && plain.GuardPolicy == "" && plain.GuardExit == ""
              && plain.GameEvents.Count == 0, "a plain line: " + string.Join(",", kinds));
        await client.DeleteSession(mira.Id);
    }

    // As Unity runs it: awaited on a thread with a synchronization context, every callback on that thread.
    static async Task OnMainThread(string url)
    {
        int main = Thread.CurrentThread.ManagedThreadId;
        var elsewhere = new List<string>();
        Action<string> where = what => { if (Thread.CurrentThread.ManagedThreadId != main) elsewhere.Add(what); };
        using (var client = new ParleyClient(url, Token, Handler()))
        {
            var npc = await client.CreateSession("tool_calling.json");
            where("after CreateSession");
            var result = await client.Turn(npc.Id, "How many arrows are there?", r => { where("tools"); return "5"; },
                                           e => where("onEvent " + e.Kind));
            where("after Turn");
            Check(result.Reply.Contains("5"), "main-thread turn's reply: " + result.Reply);
            using (var cts = new CancellationTokenSource())
            {
                bool threw = false;
                try
                {
                    await client.Turn(npc.Id, "How many arrows are there?", null, e =>
                    {
                        where("onEvent " + e.Kind);
                        if (e.Kind == "tool_request") cts.Cancel();
                    }, cts.Token);
                }
                catch (OperationCanceledException) { threw = true; }
                where("after a cancelled Turn");
                Check(threw, "cancelled on the main thread");
            }
            await client.DeleteSession(npc.Id);
        }
        Check(elsewhere.Count == 0, "off the main thread: " + string.Join(", ", elsewhere));
        Ok("callbacks on the caller's thread");
    }

    // Turns whose streams the test's cutting proxy (tests/clients/cutting_proxy.py) at `url` breaks: sessions
    // named cut.KIND.* and half.KIND.* have the stream cut after, or in the middle of, its first KIND event;
    // lost.KIND.* too, and their resume goes to the server at PARLEY_OTHER_URL, which never ran the turn.
    // Run on a one-thread context, as Unity's main thread: the callbacks stay on it across a resume.
    static async Task Resume(string url, string suffix)
    {
        int main = Thread.CurrentThread.ManagedThreadId;
        var elsewhere = new List<string>();
        using (var client = new ParleyClient(url, Token, Handler()))
        {
            foreach (var how in new[] { "cut", "half" })
            {
                var whole = await client.CreateSession("tool_calling.json", null, "whole." + how + suffix);
                var wholeEvents = new List<TurnEvent>();
                var unbroken = await Within(client.Turn(whole.Id, "How many arrows are there?", r => "240",
                                                        e => wholeEvents.Add(e)), "the unbroken turn");
                var broken = await client.CreateSession("tool_calling.json", null, how + ".tool_request" + suffix);
                var events = new List<TurnEvent>();
                var calls = new List<string>();
                var resumed = await Within(client.Turn(broken.Id, "How many arrows are there?", r =>
                {
                    if (Thread.CurrentThread.ManagedThreadId != main) elsewhere.Add("tools");
                    calls.Add(r.Tool);
                    return "240";
                }, e =>
                {
                    if (Thread.CurrentThread.ManagedThreadId != main) elsewhere.Add("onEvent " + e.Kind);
                    events.Add(e);
                }), "the broken turn");
                var run = events[0].Text("run");
                for (int i = 0; i < events.Count; i++)
                    Check(events[i].Id == run + "." + (i + 1), how + ": every event once, in order: " + events[i].Id + " at " + i);
                Check(calls.Count == 1 && calls[0] == "check_stock", how + ": the tool request answered once: " + calls.Count);
                Func<List<TurnEvent>, string, List<string>> comparable = (list, id) => list.Take(list.Count - 1).Select(e =>
                {
                    var data = new Dictionary<string, object>(e.Data);
                    data.Remove("run");
                    data.Remove("session");
                    data.Remove("call_id");
                    return (e.Kind + " " + Json.Write(data)).Replace(id, "SESSION");
                }).ToList();
                var got = comparable(events, broken.Id);
                var want = comparable(wholeEvents, whole.Id);
                Check(got.SequenceEqual(want), how + ": the events are the unbroken turn's:\n" + string.Join("\n", got)
                      + "\n---\n" + string.Join("\n", want));
                Check(resumed.Reply.Replace(broken.Id, "SESSION") == unbroken.Reply.Replace(whole.Id, "SESSION"),
                      how + ": the reply is the unbroken turn's: " + resumed.Reply);
                var said = string.Concat(events.Where(e => e.Kind == "token" && e.Text("node") == "reply").Select(e => e.Text("text")));
                Check(said == resumed.Reply, how + ": the tokens say the reply, nothing twice: " + said);
                Check((await client.GetSession(broken.Id)).Turns == 1, how + ": one turn");
            }
            Ok("a broken stream resumed");

            var lostId = "lost.turn_started" + suffix;
            await client.CreateSession("chat.json", null, lostId);
            using (var other = new ParleyClient(Environment.GetEnvironmentVariable("PARLEY_OTHER_URL"), Token))
                await other.CreateSession("chat.json", null, lostId); // a replica that did not run the turn
            var kinds = new List<string>();
            var lost = await Fails(() => Within(client.Turn(lostId, "Hello, innkeeper", null, e => kinds.Add(e.Kind)), "the lost turn"),
                                   "a turn whose run the resume's server does not know");
            Check(lost.Code == "turn_lost" && lost.Line == "Hello, innkeeper", "turn_lost, the line handed back: " + lost.Code
                  + " " + lost.Line);
            Check(lost.Message.Contains("server stopped before the turn finished") && lost.Message.Contains("say the line again"),
                  "turn_lost says what to do: " + lost.Message);
            Check(kinds.SequenceEqual(new[] { "turn_started" }), "events before the break: " + string.Join(",", kinds));
            Ok("a turn lost with its server");

            var cancelId = "cut.tool_request.cancel" + suffix;
            await client.CreateSession("tool_calling.json", null, cancelId);
            var dropped = await Fails(() => Within(client.Turn(cancelId, "How many arrows are there?", null, null,
                                                               default(CancellationToken), "", true), "the cancel_on_disconnect turn"),
                                      "a turn asked with cancelOnDisconnect");
            Check(dropped.Code == "stream_ended" && dropped.Line == "How many arrows are there?",
                  "not resumed: " + dropped.Code + " " + dropped.Message);
            Check((await Idle(client, cancelId)).Turns == 0, "the server cancelled the turn");
            Ok("cancelOnDisconnect is not resumed");
        }
        Check(elsewhere.Count == 0, "off the main thread: " + string.Join(", ", elsewhere));
    }

    // Counts the requests to the resume route, whichever handler carries them.
    sealed class Counting : DelegatingHandler
    {
        public int Resumes;
        public Counting(HttpMessageHandler inner) : base(inner) { }

        protected override Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancel)
        {
            if (request.RequestUri.AbsolutePath.Contains("/runs/")) Interlocked.Increment(ref Resumes);
            return base.SendAsync(request, cancel);
        }
    }

    // A server killed mid-turn is server_gone, with the line; one never started (a closed port) is unavailable.
    // A game that cannot send its child SIGTERM stops the server by request, with the server's token.
    static async Task Shutdown(string url)
    {
        using (var stranger = new ParleyClient(url, null, Handler()))
        {
            var refused = await Fails(() => Within(stranger.Shutdown(), "a shutdown without the token"), "no token");
            Check(refused.Code == "unauthorized", "a shutdown needs the token: " + refused.Code);
        }
        using (var client = new ParleyClient(url, Token, Handler()) { ResumeTries = 1 })
        {
            var npc = await client.CreateSession("tool_calling.json");
            Task<double> stopping = null;
            var cancelled = await Fails(() => Within(client.Turn(npc.Id, "How many arrows are there?", null, e =>
            {
                if (e.Kind == "tool_request" && stopping == null) stopping = client.Shutdown();
            }), "the turn the shutdown cancels"), "a turn running at the shutdown");
            Check(cancelled.Code == "cancelled" && cancelled.Message.Contains("shutting down"),
                  "the running turn is cancelled: " + cancelled.Code + " " + cancelled.Message);
            Check(stopping != null && await Within(stopping, "the shutdown's answer") == 2.0, "it answers its limit");
            Ok("a shutdown by request");
        }
    }

    static async Task Gone(string url)
    {
        const string question = "How many arrows are there?"; // the scripted backend calls check_stock, and waits
        const int tries = 3;
        var counting = new Counting(Handler() ?? new HttpClientHandler());
        using (var killer = new HttpClient())
        using (var client = new ParleyClient(url, Token, counting) { ResumeTries = tries, ResumeDelay = TimeSpan.FromMilliseconds(10) })
        {
            var npc = await client.CreateSession("tool_calling.json");
            var kinds = new List<string>();
            Task<HttpResponseMessage> killed = null;
            var gone = await Fails(() => Within(client.Turn(npc.Id, question, null, e =>
            {
                kinds.Add(e.Kind);
                // the turn waits for the tool's result: the server dies there, its stream open
                if (e.Kind == "tool_request" && killed == null)
                    killed = killer.PostAsync(Environment.GetEnvironmentVariable("PARLEY_KILL_URL"), new StringContent(""));
            }), "the turn whose server is killed"), "a turn whose server is killed mid-turn");
            Check(killed != null && (int)(await Within(killed, "the kill switch")).StatusCode == 204, "the server was killed");
            Check(gone.Code == "server_gone" && gone.Line == question, "server_gone, the line handed back: " + gone.Code
                  + " " + gone.Line + " " + gone.Message);
            Check(gone.Message.Contains("say the line again"), "server_gone says what to do: " + gone.Message);
            Check(kinds.First() == "turn_started" && kinds.Last() == "tool_request", "events: " + string.Join(",", kinds));
            Check(counting.Resumes == tries, "every try to resume it was made: " + counting.Resumes);
            var after = await Fails(() => Within(client.Health(), "health after the kill"), "a request after the kill");
            Check(after.Code == "unavailable", "a new request reaches no server: " + after.Code + " " + after.Message);
            Ok("a server killed mid-turn is server_gone");
        }
        var closed = new Counting(Handler() ?? new HttpClientHandler());
        using (var client = new ParleyClient(Environment.GetEnvironmentVariable("PARLEY_CLOSED_URL"), Token, closed))
        {
            var health = await Fails(() => Within(client.Health(), "health of a closed port"), "a closed port's health");
            Check(health.Code == "unavailable", "never started: " + health.Code + " " + health.Message);
            var turn = await Fails(() => Within(client.Turn("innkeeper", question), "a turn on a closed port"),
                                   "a closed port's turn");
            Check(turn.Code == "unavailable", "a turn that never began: " + turn.Code + " " + turn.Message);
            Check(closed.Resumes == 0, "nothing resumed: " + closed.Resumes);
            Ok("a server never started is unavailable");
        }
    }

    static async Task Model(string url)
    {
        using (var client = new ParleyClient(url, Token))
        {
            var session = await client.CreateSession("chat.json", new Dictionary<string, object> { { "player_name", "Ada" } });
            var tokens = new List<string>();
            var result = await Within(client.Turn(session.Id, "Hello! Is there a room free tonight?", null,
                                                  e => { if (e.Kind == "token") tokens.Add(e.Text("text")); }), "model turn");
            Check(result.Reply.Trim().Length > 0, "a reply");
            Check(tokens.Count > 0, "tokens streamed");
            Check((await client.GetSession(session.Id)).Turns == 1, "one turn");
            await client.DeleteSession(session.Id);
            Console.WriteLine("reply: " + result.Reply.Replace("\n", " "));
            Ok("model turn");
        }
    }
}

// A one-thread synchronization context, like Unity's main thread: Run pumps posted continuations until the work ends.
sealed class MainThread : SynchronizationContext
{
    readonly BlockingCollection<KeyValuePair<SendOrPostCallback, object>> queue =
        new BlockingCollection<KeyValuePair<SendOrPostCallback, object>>();

    public override void Post(SendOrPostCallback d, object state)
    {
        queue.Add(new KeyValuePair<SendOrPostCallback, object>(d, state));
    }

    public static void Run(Func<Task> work)
    {
        var context = new MainThread();
        var before = Current;
        SetSynchronizationContext(context);
        try
        {
            var task = work();
            task.ContinueWith(_ => context.queue.CompleteAdding(), TaskScheduler.Default);
            foreach (var item in context.queue.GetConsumingEnumerable()) item.Key(item.Value);
            task.GetAwaiter().GetResult();
        }
        finally
        {
            SetSynchronizationContext(before);
        }
    }
}
