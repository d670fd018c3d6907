// ProtocolDriver.cs: the shared protocol test set (clients/protocol/README.md) run through ParleyConversation,
// the API the Unity package gives a game, over whichever IParleyTransport it is handed. It needs no UnityEngine:
// with HttpClientTransport it builds beside ParleyClient.cs and ParleyConversation.cs alone.
// Reads PARLEY_URL, PARLEY_TOKEN, PARLEY_PROTOCOL and PARLEY_CLIENT; prints "step N JSON" per step, then
// "protocol done". Run it awaited on one thread with a synchronization context (Unity's main thread).

using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Threading.Tasks;
using Parley;

public static class ProtocolDriver
{
    public static async Task Run(Func<IParleyTransport> transport, TextWriter output)
    {
        string client = Environment.GetEnvironmentVariable("PARLEY_CLIENT") ?? "unity";
        var script = Json.Obj(Named(Json.Parse(File.ReadAllText(Environment.GetEnvironmentVariable("PARLEY_PROTOCOL"))), client));
        var talks = new Dictionary<string, ParleyConversation>();
        using (var parley = new ParleyClient(Environment.GetEnvironmentVariable("PARLEY_URL"),
                                             Environment.GetEnvironmentVariable("PARLEY_TOKEN"), transport()))
        {
            var steps = Json.Arr(script["steps"]);
            for (int n = 0; n < steps.Count; n++)
            {
                object seen;
                try
                {
                    seen = await Step(parley, talks, Json.Obj(steps[n]));
                }
                catch (ParleyException e)
                {
                    seen = new Dictionary<string, object> { { "error", e.Code } };
                }
                output.WriteLine("step " + n + " " + Json.Write(seen));
            }
        }
        output.WriteLine("protocol done");
    }

    static object Named(object value, string client)
    {
        var text = value as string;
        if (text != null) return text.Replace("{client}", client);
        var list = value as List<object>;
        if (list != null) return list.Select(item => Named(item, client)).ToList();
        var dict = value as Dictionary<string, object>;
        if (dict != null) return dict.ToDictionary(pair => pair.Key, pair => Named(pair.Value, client));
        return value;
    }

    static async Task<object> Step(ParleyClient parley, Dictionary<string, ParleyConversation> talks,
                                   Dictionary<string, object> step)
    {
        string what = Json.Str(step, "do"), session = Json.Str(step, "session");
        switch (what)
        {
            case "health":
                return new Dictionary<string, object> { { "status", (await parley.Health()).Status } };
            case "create":
            {
                var npc = new ParleyConversation(parley, Json.Str(step, "asset"), session);
                talks[session] = npc;
                var info = await npc.Connect();
                return new Dictionary<string, object> { { "session", info.Id }, { "turns", info.Turns } };
            }
            case "say":
            {
                var npc = talks[session];
                var seen = new Seen();
                var answers = Json.Get(step, "tools") as Dictionary<string, object> ?? new Dictionary<string, object>();
                bool cancel = Json.Str(step, "cancel_at") == "tool_request";
                npc.AnswerOtherTools = call =>
                {
                    seen.Tools.Add(call.Tool);
                    if (!cancel) return Task.FromResult(answers.ContainsKey(call.Tool) ? (string)answers[call.Tool] : "");
                    npc.Cancel(); // and the game never answers: the cancel lets the turn go
                    return new TaskCompletionSource<string>().Task;
                };
                await seen.Turn(npc, Json.Str(step, "line"));
                return seen.Json();
            }
            case "double_text":
            {
                var npc = talks[session];
                var answers = Json.Obj(step["tools"]);
                Seen first = new Seen(), second = new Seen();
                Task secondTurn = null;
                npc.AnswerOtherTools = async call =>
                {
                    string answer = answers.ContainsKey(call.Tool) ? (string)answers[call.Tool] : "";
                    if (secondTurn != null)
                    {
                        second.Tools.Add(call.Tool);
                        return answer;
                    }
                    first.Tools.Add(call.Tool);
                    secondTurn = second.Turn(npc, Json.Str(step, "second"));
                    await second.Queued.Task; // the second line waits behind the first
                    return answer;
                };
                await first.Turn(npc, Json.Str(step, "line"));
                await secondTurn;
                return new Dictionary<string, object> { { "first", first.Json() }, { "second", second.Json() } };
            }
            case "history":
            {
                var turns = await parley.Turns(session);
                return new Dictionary<string, object> { { "turns", turns.Count }, { "lines", turns.Select(t => t.Line).ToList() } };
            }
            case "delete":
                if (talks.ContainsKey(session)) await talks[session].Delete();
                else await parley.DeleteSession(session);
                return new Dictionary<string, object> { { "deleted", true } };
            default:
                throw new Exception("a step this driver does not know: " + what);
        }
    }

    // What a player of one turn saw.
    sealed class Seen
    {
        public readonly List<string> Tools = new List<string>();
        public readonly TaskCompletionSource<bool> Queued = new TaskCompletionSource<bool>();
        readonly List<string> spoken = new List<string>();
        readonly Dictionary<string, object> tags = new Dictionary<string, object>();
        string shown = "", reply = "", error = "", line = "";

        public async Task Turn(ParleyConversation npc, string said)
        {
            try
            {
                var result = await npc.Say(said, text => shown += text, text => spoken.Add(text), (name, value) => tags[name] = value,
                                           e => { if (e.Kind == "turn_queued") Queued.TrySetResult(true); });
                reply = result.Reply;
            }
            catch (ParleyException e)
            {
                error = e.Code;
                line = e.Line;
            }
        }

        public Dictionary<string, object> Json()
        {
            return new Dictionary<string, object>
            {
                { "tools", Tools }, { "shown", shown }, { "reply", reply }, { "spoken", spoken },
                { "queued", Queued.Task.IsCompleted }, { "tags", tags }, { "error", error }, { "line", line },
            };
        }
    }
}
