// The Unity package's test program, built with Mono's mcs from Runtime/, the sample, ProtocolDriver.cs and the
// UnityEngine stand-ins (StandIns/UnityEngine.cs: NOT Unity), and run against a real `parley serve`:
//   mono UnityPackageTest.exe URL sample     the sample NPC (Samples~/TalkingNpc) on a ParleyNpc: its transcript
//                                            on stdout, the checks ("ok NAME") on stderr
//   mono UnityPackageTest.exe URL resume     URL: tests/clients/cutting_proxy.py before a scripted server;
//                                            PARLEY_OTHER_URL: a second server, that never ran the turn
//   mono UnityPackageTest.exe URL protocol   the shared protocol test set (PARLEY_PROTOCOL, ...: ProtocolDriver.cs)
//   mono UnityPackageTest.exe URL model      one turn on the sample model
// PARLEY_TOKEN: the server's token. PARLEY_TRANSPORT=unitywebrequest picks UnityWebRequestTransport on a desktop
// build (a build with -define:UNITY_WEBGL has nothing else). Everything runs on the stand-in's main thread.
// Ends with "all passed", or "FAIL ..." and exit code 1. tests/clients/test_unity_package.py builds and runs it.

using System;
using System.Collections.Generic;
using System.Linq;
using System.Text;
using System.Threading.Tasks;
using Parley;
using UnityEngine;
using UnityEngine.Networking;

static class UnityPackageTest
{
    static readonly TimeSpan Deadline = TimeSpan.FromSeconds(30);
    static readonly string Token = Environment.GetEnvironmentVariable("PARLEY_TOKEN");
    static readonly List<string> offMainThread = new List<string>();

    static int Main(string[] args)
    {
        var modes = new[] { "sample", "resume", "protocol", "model" };
        if (args.Length != 2 || !modes.Contains(args[1]))
        {
            Console.Error.WriteLine("usage: UnityPackageTest.exe URL " + string.Join("|", modes));
            return 2;
        }
        try
        {
            Player.Run(async () =>
            {
                if (args[1] == "sample") await Sample(args[0]);
                else if (args[1] == "resume") await Resume(args[0]);
                else if (args[1] == "protocol") await ProtocolDriver.Run(Transport, Console.Out);
                else await Model(args[0]);
            });
            Check(offMainThread.Count == 0, "callbacks off the main thread: " + string.Join(", ", offMainThread));
            Console.Error.WriteLine("requests through UnityWebRequest: " + UnityWebRequest.Made);
            Console.Error.WriteLine("all passed");
            return 0;
        }
        catch (Exception e)
        {
            Console.Error.WriteLine("FAIL " + e);
            return 1;
        }
    }

    static ParleyTransportChoice Choice()
    {
        return Environment.GetEnvironmentVariable("PARLEY_TRANSPORT") == "unitywebrequest"
            ? ParleyTransportChoice.UnityWebRequest : ParleyTransportChoice.Automatic;
    }

    static IParleyTransport Transport() { return ParleyNpc.Transport(Choice()); }

    static void Check(bool condition, string what)
    {
        if (!condition) throw new Exception("check failed: " + what);
    }

    static void Ok(string name) { Console.Error.WriteLine("ok " + name); }

    static void OnMain(string what)
    {
        if (!Player.OnMainThread) offMainThread.Add(what);
    }

    static async Task<T> Within<T>(Task<T> task, string what)
    {
        if (await Task.WhenAny(task, Task.Delay(Deadline)) != task) throw new TimeoutException(what + ": nothing in " + Deadline);
        return await task;
    }

    static async Task Within(Task task, string what)
    {
        if (await Task.WhenAny(task, Task.Delay(Deadline)) != task) throw new TimeoutException(what + ": nothing in " + Deadline);
        await task;
    }

    static async Task Until(Func<bool> condition, string what)
    {
        var until = DateTime.UtcNow + Deadline;
        while (!condition())
        {
            if (DateTime.UtcNow > until) throw new TimeoutException(what + ": not in " + Deadline);
            await Task.Yield(); // the next frame (the stand-in's loop runs what is posted, then a frame)
        }
    }

    // The SSE line reader on chunks that split a UTF-8 character and a \r\n (the stand-in's ReceiveData splits
    // the server's stream into 7-byte pieces too; this covers \r\n and a lone \r, which the server does not send).
    static void LineChecks()
    {
        var bytes = Encoding.UTF8.GetBytes("event: token\r\ndata: {\"text\":\"\u00e4\u20ac\ud83c\udff9\"}\r\n\r\n:keep\rid: r.1\n");
        for (int size = 1; size <= bytes.Length; size++)
        {
            var reader = new SseLineReader();
            var lines = new List<string>();
            for (int at = 0; at < bytes.Length; at += size)
            {
                int n = Math.Min(size, bytes.Length - at);
                reader.Feed(bytes.Skip(at).Take(n).ToArray(), n);
                string line;
                while (reader.TryTake(out line)) lines.Add(line);
            }
            Check(lines.SequenceEqual(new[] { "event: token", "data: {\"text\":\"\u00e4\u20ac\ud83c\udff9\"}", "", ":keep", "id: r.1" }),
                  "lines from " + size + "-byte chunks: " + string.Join("|", lines));
        }
        Ok("sse lines across chunks");
    }

    static async Task Sample(string url)
    {
        LineChecks();
        var hilde = new GameObject("Hilde");
        var npc = hilde.AddComponent<ParleyNpc>(); // the inspector's fields, as a scene would have them
        npc.serverUrl = url;
        npc.token = Token ?? "";
        npc.asset = "tool_calling.json";
        npc.sessionId = "unity.sample";
        npc.transport = Choice();
        var states = new List<ParleyState>();
        npc.StateChanged += s => { OnMain("StateChanged"); states.Add(s); };
        var talker = hilde.AddComponent<TalkingNpc>();
        var events = new List<TurnEvent>();
        npc.Conversation.Event += e => { OnMain("Event " + e.Kind); events.Add(e); };

        Console.WriteLine("(The player walks up to " + talker.npcName + ", the quartermaster.)");
        await Until(() => npc.State == ParleyState.Idle, "the NPC connects in Start");
        Check(states.SequenceEqual(new[] { ParleyState.Connecting, ParleyState.Idle }), "connecting: " + string.Join(",", states));
        states.Clear();

        await Within(talker.Talk("Quartermaster, how many arrows?"), "a turn");
        var finished = events.Last();
        Check(finished.Kind == "turn_finished", "the turn finished: " + finished.Kind);
        string reply = finished.Text("reply");
        int replyTokens = events.Count(e => e.Kind == "token" && e.IsReply);
        int innerTokens = events.Count(e => e.Kind == "token" && !e.IsReply);
        Check(talker.subtitle == reply && reply.Contains("240 arrows in the armoury \u2014 counted twice"),
              "the subtitle is the reply, nothing else: " + talker.subtitle + " / " + reply);
        Check(replyTokens > 1 && innerTokens > 0, "streamed in pieces, the tool call's tokens left out: " + replyTokens + " " + innerTokens);
        Check(states.SequenceEqual(new[] { ParleyState.Thinking, ParleyState.WaitingForGame, ParleyState.Thinking,
                                           ParleyState.Speaking, ParleyState.Idle }), "a turn's states: " + string.Join(",", states));
        Ok("a turn: the subtitle is the reply's tokens only, the tool answered, the states in order");

        await Within(talker.Save(), "save");
        Check(PlayerPrefs.GetString("parley.unity.sample").Contains("Quartermaster, how many arrows?"), "the save holds the history");
        await Within(talker.Talk("And the bolts?"), "a second turn");
        Check((await npc.Conversation.Client.Turns("unity.sample")).Count == 2, "two turns before the load");
        await Within(talker.Load(), "load");
        Check((await npc.Conversation.Client.Turns("unity.sample")).Count == 1, "the load put the saved turn back");
        Ok("save and load the history");

        // The game takes its time over the count, and the player walks away: Stop.
        states.Clear();
        npc.AnswerToolAsync("check_stock", call => new TaskCompletionSource<string>().Task);
        Action<ParleyState> walkAway = s => { if (s == ParleyState.WaitingForGame) talker.StopTalking(); };
        npc.StateChanged += walkAway;
        int before = events.Count;
        await Within(talker.Talk("Quartermaster, how many arrows?"), "a cancelled turn");
        npc.StateChanged -= walkAway;
        var failed = events.Skip(before).Last();
        Check(failed.Kind == "turn_failed" && failed.Data.ContainsKey("error")
              && Json.Str(Json.Obj(failed.Data["error"]), "code") == "cancelled", "cancelled: " + failed.RawData);
        Check(states.First() == ParleyState.Thinking && states.Contains(ParleyState.WaitingForGame)
              && states.Last() == ParleyState.Idle && !states.Contains(ParleyState.Speaking), "a cancel's states: " + string.Join(",", states));
        Check((await npc.Conversation.Client.Turns("unity.sample")).Count == 1, "the cancelled turn left nothing");
        Ok("cancel");

        await npc.Conversation.Delete();
        UnityEngine.Object.Destroy(npc);

        // A second NPC whose asset asks for reply tags (bard.json's reply_tags: mood, gesture).
        Console.WriteLine();
        Console.WriteLine("(The player turns to Tomas, the bard.)");
        var tomas = new GameObject("Tomas");
        var bard = tomas.AddComponent<ParleyNpc>();
        bard.serverUrl = url;
        bard.token = Token ?? "";
        bard.asset = "bard.json";
        bard.sessionId = "unity.sample.bard";
        bard.transport = Choice();
        bard.connectOnStart = false;
        var tags = new List<string>();
        bard.Tag += (tag, value) => { OnMain("Tag"); tags.Add(tag + "=" + value); };
        var singer = tomas.AddComponent<TalkingNpc>();
        singer.npcName = "Tomas";
        await Within(singer.Talk("Play us a song!"), "the bard's turn");
        Check(tags.SequenceEqual(new[] { "mood=cheerful", "gesture=bow" }), "the Tag event, as tags arrive: " + string.Join(",", tags));
        Console.WriteLine("Player: Another one!");
        var sung = await Within(bard.Say("Another one!"), "the bard's second turn");
        Console.WriteLine("Tomas: " + sung.Reply);
        Check(sung.Tags.Count == 2 && sung.Tags["mood"] == "cheerful" && sung.Tags["gesture"] == "bow",
              "TurnResult.Tags: " + Json.Write(sung.Tags));
        await bard.Conversation.Delete();
        Ok("reply tags");
        Check(offMainThread.Count == 0, "callbacks off the main thread: " + string.Join(", ", offMainThread));
        Ok("callbacks on the main thread");
    }

    // Turns whose streams the cutting proxy breaks (after the tool request, and in the middle of it), resumed
    // through the transport with Last-Event-ID; a resume that reaches the server that never ran the turn: turn_lost.
    static async Task Resume(string url)
    {
        using (var client = new ParleyClient(url, Token, Transport()))
        {
            foreach (var how in new[] { "cut", "half" })
            {
                var whole = await Talk(client, "whole." + how + ".unity");
                var broken = await Talk(client, how + ".tool_request.unity");
                var run = broken.Events[0].Text("run");
                for (int i = 0; i < broken.Events.Count; i++)
                    Check(broken.Events[i].Id == run + "." + (i + 1), how + ": every event once, in order: " + broken.Events[i].Id);
                Check(broken.Tools == 1, how + ": the tool asked once: " + broken.Tools);
                Func<Talked, string> comparable = t => string.Join("\n", t.Events.Take(t.Events.Count - 1).Select(e =>
                {
                    var data = new Dictionary<string, object>(e.Data);
                    data.Remove("run");
                    data.Remove("session");
                    data.Remove("call_id");
                    return e.Kind + " " + Json.Write(data);
                })).Replace(t.Session, "SESSION");
                Check(comparable(broken) == comparable(whole), how + ": the unbroken turn's events:\n" + comparable(broken)
                      + "\n---\n" + comparable(whole));
                Check(broken.Shown == broken.Reply && broken.Reply.Replace(broken.Session, "S") == whole.Reply.Replace(whole.Session, "S"),
                      how + ": the subtitle is the reply, nothing twice: " + broken.Shown);
            }
            Ok("a broken stream resumed");

            const string lostId = "lost.turn_started.unity";
            await client.CreateSession("chat.json", null, lostId);
            using (var other = new ParleyClient(Environment.GetEnvironmentVariable("PARLEY_OTHER_URL"), Token, Transport()))
                await other.CreateSession("chat.json", null, lostId); // a replica that did not run the turn
            var npc = new ParleyConversation(client, "chat.json", lostId);
            ParleyException lost = null;
            try
            {
                await Within(npc.Say("Hello, innkeeper"), "the lost turn");
            }
            catch (ParleyException e)
            {
                lost = e;
            }
            Check(lost != null && lost.Code == "turn_lost" && lost.Line == "Hello, innkeeper",
                  "turn_lost, the line handed back: " + (lost == null ? "none" : lost.Code + " " + lost.Line));
            Check(npc.State == ParleyState.Idle, "a lost turn leaves the NPC idle: " + npc.State);
            Ok("a turn lost with its server");
        }
    }

    sealed class Talked
    {
        public string Session, Reply, Shown = "";
        public int Tools;
        public readonly List<TurnEvent> Events = new List<TurnEvent>();
    }

    static async Task<Talked> Talk(ParleyClient client, string session)
    {
        var talked = new Talked { Session = session };
        var npc = new ParleyConversation(client, "tool_calling.json", session);
        npc.AnswerTool("check_stock", call => { OnMain("tool"); talked.Tools++; return "240 arrows \u2014 counted twice"; });
        npc.Event += e => { OnMain("Event " + e.Kind); talked.Events.Add(e); };
        var result = await Within(npc.Say("How many arrows are there?", text => talked.Shown += text), "the turn of " + session);
        talked.Reply = result.Reply;
        return talked;
    }

    static async Task Model(string url)
    {
        using (var client = new ParleyClient(url, Token, Transport()))
        {
            var npc = new ParleyConversation(client, "chat.json");
            npc.Variables = new Dictionary<string, object> { { "player_name", "Ada" } };
            var shown = new StringBuilder();
            int pieces = 0;
            var result = await Within(npc.Say("Hello! Is there a room free tonight?", text =>
            {
                OnMain("onToken");
                pieces++;
                shown.Append(text);
            }), "model turn");
            Check(result.Reply.Trim().Length > 0 && pieces > 0, "a reply, streamed");
            Check(shown.ToString() == result.Reply, "the subtitle is the reply: " + shown + " / " + result.Reply);
            await npc.Delete();
            Console.WriteLine("reply: " + result.Reply.Replace("\n", " "));
            Ok("model turn");
        }
    }
}
