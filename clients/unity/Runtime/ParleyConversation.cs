// ParleyConversation.cs: one NPC's session on `parley serve`, as a game talks to it: say a line and get
// the reply's text as it streams, answer the NPC's tool calls, cancel, save and load the history, and watch
// a state (Idle, Thinking, WaitingForGame, Speaking, ...). ParleyNpc is the MonoBehaviour around it; this
// class needs no UnityEngine, so any .NET can use it. The protocol itself is ParleyClient's.
//
// Threading: awaited from Unity's main thread, every callback and event runs there.

using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace Parley
{
    /// <summary>Where an NPC's session is. Disconnected: no session yet. Connecting: creating or finding it.
    /// Idle: ready for a line. Thinking: a turn runs (reading, generating what the player does not see).
    /// WaitingForGame: the turn waits for the game's answer to a tool call. Speaking: the reply streams.
    /// Failed: the server could not be reached (unavailable, server_gone); the next Say or Connect tries again.</summary>
    public enum ParleyState { Disconnected, Connecting, Idle, Thinking, WaitingForGame, Speaking, Failed }

    /// <summary>Something whose conversation a game's save system keeps: SaveHistory gives the session's
    /// history as JSON text (GET .../history) to store under SaveKey, LoadHistory puts it back (PUT .../history).</summary>
    public interface IParleySaveable
    {
        string SaveKey { get; }
        Task<string> SaveHistory();
        Task LoadHistory(string historyJson);
    }

    public sealed class ParleyConversation : IParleySaveable, IDisposable
    {
        public readonly ParleyClient Client;
        /// <summary>The asset the session runs (a path under one of the server's --assets folders).</summary>
        public readonly string Asset;
        /// <summary>The variables a new session starts with (null: the asset's defaults).</summary>
        public IDictionary<string, object> Variables;
        readonly bool ownsClient;
        readonly Dictionary<string, Func<ToolRequest, Task<string>>> tools =
            new Dictionary<string, Func<ToolRequest, Task<string>>>();
        readonly List<TaskCompletionSource<string>> waitingForGame = new List<TaskCompletionSource<string>>();
        int running; // turns under way (a line said over a running turn waits behind it: double_text)

        /// <param name="sessionId">The session's id (letters, digits, _ . -): Connect finds it on the server, or
        /// creates it with that id (a save game's NPC keeps its id). Null: the server names a new one.</param>
        public ParleyConversation(ParleyClient client, string asset, string sessionId = null, bool ownsClient = false)
        {
            if (client == null) throw new ArgumentNullException("client");
            if (string.IsNullOrEmpty(asset)) throw new ArgumentException("an asset is needed, e.g. \"tool_calling.json\"", "asset");
            Client = client;
            Asset = asset;
            SessionId = string.IsNullOrEmpty(sessionId) ? null : sessionId;
            this.ownsClient = ownsClient;
        }

        public string SessionId { get; private set; }
        public ParleyState State { get; private set; }
        /// <summary>The error that put the conversation in Failed (null otherwise).</summary>
        public ParleyException LastError { get; private set; }

        /// <summary>Raised when State changes (only then), with the new state.</summary>
        public event Action<ParleyState> StateChanged;
        /// <summary>A reply tag the asset asks for (its reply_tags): slot name and value, e.g. "mood", "angry",
        /// as soon as a node sets it (emotions, animations). Every turn's tags are also in TurnResult.Tags.</summary>
        public event Action<string, string> Tag;
        /// <summary>Every event of every turn, for what the other callbacks do not cover (guarded, game_event, ...).</summary>
        public event Action<TurnEvent> Event;

        string IParleySaveable.SaveKey { get { return SessionId ?? Asset; } }

        /// <summary>Answers the tool <paramref name="name"/> with <paramref name="answer"/>'s text (on the main thread).</summary>
        public void AnswerTool(string name, Func<ToolRequest, string> answer)
        {
            if (answer == null) throw new ArgumentNullException("answer");
            tools[name] = call => Task.FromResult(answer(call));
        }

        /// <summary>Answers the tool <paramref name="name"/> with a task's result: game work that takes time (see
        /// ParleyClient.Answered for a coroutine). The turn waits for it, up to the server's --tool-timeout.</summary>
        public void AnswerToolAsync(string name, Func<ToolRequest, Task<string>> answer)
        {
            if (answer == null) throw new ArgumentNullException("answer");
            tools[name] = answer;
        }

        /// <summary>Answers every tool that has no AnswerTool handler of its own (null: such a call is answered with
        /// {"error": "the game has no tool NAME"}).</summary>
        public Func<ToolRequest, Task<string>> AnswerOtherTools;

        /// <summary>Finds the session (SessionId given) or creates it. Failed, and the error thrown, when no server answers.</summary>
        public async Task<SessionInfo> Connect()
        {
            Set(ParleyState.Connecting);
            try
            {
                SessionInfo session = null;
                if (SessionId != null)
                {
                    try
                    {
                        session = await Client.GetSession(SessionId);
                    }
                    catch (ParleyException e) when (e.Code == "unknown_session") { }
                }
                if (session == null) session = await Client.CreateSession(Asset, Variables, SessionId);
                SessionId = session.Id;
                LastError = null;
                Set(running > 0 ? ParleyState.Thinking : ParleyState.Idle);
                return session;
            }
            catch (ParleyException e)
            {
                Fail(e);
                throw;
            }
        }

        /// <summary>One turn of <paramref name="line"/>. onToken gets the reply's text as it streams (only the text
        /// the player is meant to see: no tool call's JSON, no classifier's label), onSpeak each whole sentence of
        /// a Generate and Speak node (for text-to-speech), onTag each reply tag. Tool calls are answered with the
        /// AnswerTool handlers. A failed turn throws ParleyException (Code: cancelled, turn_lost, server_gone, ...;
        /// Line: the player's line, to offer again). Connects first when there is no session yet.</summary>
        public async Task<TurnResult> Say(string line, Action<string> onToken = null, Action<string> onSpeak = null,
                                          Action<string, string> onTag = null, Action<TurnEvent> onEvent = null)
        {
            if (SessionId == null || State == ParleyState.Disconnected) await Connect();
            running++;
            Set(ParleyState.Thinking);
            try
            {
                var result = await Client.Turn(SessionId, line, null, e => Saw(e, onToken, onSpeak, onTag, onEvent),
                                               default(CancellationToken), "", false, Answer);
                LastError = null;
                return result;
            }
            catch (ParleyException e)
            {
                if (e.Code == "unavailable" || e.Code == "server_gone") Fail(e);
                throw;
            }
            finally
            {
                running--;
                if (running == 0 && State != ParleyState.Failed) Set(ParleyState.Idle);
            }
        }

        /// <summary>Stops the running turn (and the lines waiting behind it): Say then throws ParleyException
        /// "cancelled" with the line, and the session is as it was before the turn. A tool answer the game is
        /// still working on is no longer waited for.</summary>
        public void Cancel()
        {
            if (SessionId != null) ParleyClient.Observe(Stop(SessionId));
        }

        async Task Stop(string sessionId)
        {
            try
            {
                await Client.Cancel(sessionId); // back on the caller's context (the main thread)
            }
            finally
            {
                // Once the server has stopped the turn, its stream goes on to turn_failed: a tool answer it
                // waits for is let go (sent empty; the server has no call to give it to any more).
                foreach (var wait in waitingForGame.ToArray()) wait.TrySetResult("");
            }
        }

        /// <summary>The session's history as JSON text (GET .../history), for a save game. During a turn it is
        /// the history the last finished turn left.</summary>
        public Task<string> SaveHistory()
        {
            if (SessionId == null) throw new InvalidOperationException("no session yet: Connect (or Say) first");
            return Client.ExportHistory(SessionId);
        }

        /// <summary>Puts a saved history back (PUT .../history), connecting first when needed.</summary>
        public async Task LoadHistory(string historyJson)
        {
            if (SessionId == null || State == ParleyState.Disconnected || State == ParleyState.Failed) await Connect();
            await Client.ImportHistory(SessionId, historyJson);
        }

        /// <summary>Deletes the session on the server (a running turn is cancelled first).</summary>
        public async Task Delete()
        {
            if (SessionId == null) return;
            await Client.DeleteSession(SessionId);
            Set(ParleyState.Disconnected);
        }

        public void Dispose()
        {
            if (ownsClient) Client.Dispose();
        }

        void Saw(TurnEvent e, Action<string> onToken, Action<string> onSpeak, Action<string, string> onTag,
                 Action<TurnEvent> onEvent)
        {
            if (e.Kind == "token" && e.IsReply)
            {
                Set(ParleyState.Speaking);
                if (onToken != null) onToken(e.Text("text"));
            }
            else if (e.Kind == "speak" && e.IsReply)
            {
                Set(ParleyState.Speaking);
                if (onSpeak != null) onSpeak(e.Text("text"));
            }
            else if (e.Kind == "tag")
            {
                if (onTag != null) onTag(e.Text("name"), e.Text("value"));
                if (Tag != null) Tag(e.Text("name"), e.Text("value"));
            }
            else if (e.Kind == "turn_started") Set(ParleyState.Thinking); // a line that waited behind another
            if (onEvent != null) onEvent(e);
            if (Event != null) Event(e);
        }

        async Task<string> Answer(ToolRequest call)
        {
            Func<ToolRequest, Task<string>> tool;
            Set(ParleyState.WaitingForGame);
            var abandoned = new TaskCompletionSource<string>();
            waitingForGame.Add(abandoned);
            try
            {
                if (!tools.TryGetValue(call.Tool, out tool)) tool = AnswerOtherTools;
                if (tool == null)
                    return Json.Write(new Dictionary<string, object> { { "error", "the game has no tool " + call.Tool } });
                var answer = tool(call);
                var first = await Task.WhenAny(answer, abandoned.Task);
                return await first;
            }
            finally
            {
                waitingForGame.Remove(abandoned);
                if (State == ParleyState.WaitingForGame) Set(ParleyState.Thinking);
            }
        }

        void Fail(ParleyException e)
        {
            LastError = e;
            Set(ParleyState.Failed);
        }

        void Set(ParleyState state)
        {
            if (State == state) return;
            State = state;
            if (StateChanged != null) StateChanged(state);
        }
    }
}
